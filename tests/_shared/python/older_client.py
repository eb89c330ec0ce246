"""What the older panoptes-utils telemetry client does on the wire, and nothing more.

It posts the six fields of an event (type, data, meta, ts, store_permanently, make_current) and
reads GET /current as ``response.json()["current"]``. Uses ``requests`` when it is importable
(as that client does), else the standard library with the same calls.

Usage: older_client.py BASE_URL   (prints one JSON object: what the client saw)
"""
import json
import sys

BASE = sys.argv[1].rstrip("/")

try:
    import requests

    def post(path, body):
        response = requests.post(BASE + path, json=body, timeout=5)
        response.raise_for_status()
        return response.json()

    def get(path):
        response = requests.get(BASE + path, timeout=5)
        response.raise_for_status()
        return response.json()

    LIBRARY = "requests"
except ImportError:  # pragma: no cover - depends on the machine
    import urllib.request

    def post(path, body):
        request = urllib.request.Request(
            BASE + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def get(path):
        with urllib.request.urlopen(BASE + path, timeout=5) as response:
            return json.loads(response.read())

    LIBRARY = "urllib"


def insert_current(type_, data, store_permanently=True):
    return post("/event", {
        "type": type_,
        "data": data,
        "meta": {"source": "pocs"},
        "ts": None,
        "store_permanently": store_permanently,
        "make_current": True,
    })


def insert(type_, data):
    return post("/event", {
        "type": type_,
        "data": data,
        "meta": None,
        "ts": "2026-05-10T13:00:00+02:00",
        "store_permanently": True,
        "make_current": False,
    })


def current():
    return get("/current")["current"]


def get_current(col):
    return current().get(col)


weather = insert_current("weather", {"wind_mps": 3.5, "safe": True})
ephemeral = insert_current("mount", {"ra": 10.5}, store_permanently=False)
legacy = insert("observations", {"exptime": 30})
snapshot = current()
print(json.dumps({
    "library": LIBRARY,
    "posted": [weather, ephemeral, legacy],
    "current_types": sorted(snapshot),
    "weather": get_current("weather"),
    "observations": get_current("observations"),
}))
