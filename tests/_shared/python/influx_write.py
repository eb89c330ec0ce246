"""Writes points with Debian's python3-influxdb, as an InfluxDB 1.x user does (docs/influx.md).

InfluxDBClient(host, port, username, password, database).write_points(points), the service's
token as the password. Prints one JSON object: {"result": <what write_points returned>}, or
{"error": {"code": ..., "content": ...}} when the client raised InfluxDBClientError.

Usage: influx_write.py PORT PASSWORD POINTS_JSON [TIME_PRECISION]
"""
import json
import sys

from influxdb import InfluxDBClient
from influxdb.exceptions import InfluxDBClientError

port, password, points = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
precision = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None

client = InfluxDBClient("127.0.0.1", port, "telegraf", password, "site", timeout=10)
try:
    result = client.write_points(points, time_precision=precision)
    print(json.dumps({"result": result}))
except InfluxDBClientError as err:
    content = err.content if isinstance(err.content, str) else err.content.decode()
    print(json.dumps({"error": {"code": err.code, "content": content}}))
finally:
    client.close()
