/**
 * The `--help` texts of `forward` and `archive`, apart from the commands themselves so that
 * `obs-utils telemetry --help` never loads the NATS and PostgreSQL clients.
 *
 * @module
 */
import { DEFAULT_DURABLE, DEFAULT_NATS_STREAM, DEFAULT_SUBJECT_PREFIX } from "../fleet/item.ts";

/** The `--help` text of `forward`. */
export const FORWARD_HELP: string =
  `Usage: obs-utils telemetry forward --to URL --unit UNIT [options]
       obs-utils telemetry forward --status [--site-dir DIR] [--name N] [--json]

Send every stored line of the site stream and of every run, oldest first, to a
fleet store, then follow new lines as the service writes them. Runs beside the
service; a cursor in <site_dir>/.forward/<name>.json moves only after the
destination acknowledged, so nothing is lost or stored twice. The unit is
claimed for the site id of <site_dir>/.site.json before anything is sent: one
unit, one site.

Options:
  --to URL               nats://host:port (JetStream) or postgres://user@host:port/db
  --unit UNIT            This observatory's name in the fleet [env OBS_TELEMETRY_UNIT]
  --site-dir DIR         Telemetry directory [env OBS_TELEMETRY_SITE_DIR, default telemetry]
  --name N               Cursor name [default: nats or postgres, from --to]
  --subject-prefix P     NATS subjects are P.<unit>.<stream> [default ${DEFAULT_SUBJECT_PREFIX}]
  --nats-stream S        JetStream stream, created if missing [default ${DEFAULT_NATS_STREAM}]
  --batch N              Lines per send [default 1000]
  --reclaim-unit         Take --unit over from the site holding it (a site moved
                         to a new disk); otherwise a unit another site holds stops
                         the forwarder
  --status               Print each cursor's lag and exit; sends nothing
  --json                 With --status: one JSON object per line
  -h, --help             Show this help
`;

/** The `--help` text of `archive`. */
export const ARCHIVE_HELP: string =
  `Usage: obs-utils telemetry archive --from URL --to URL [options]

Move forwarded telemetry from NATS JetStream into PostgreSQL: a durable consumer
that inserts into telemetry_events and acknowledges after the commit. Start
several with the same --durable to share the work.

Options:
  --from URL             nats://host:port
  --to URL               postgres://user@host:port/db
  --nats-stream S        JetStream stream [default ${DEFAULT_NATS_STREAM}]
  --subject-prefix P     Subjects of the stream if it must be created [default ${DEFAULT_SUBJECT_PREFIX}]
  --durable NAME         Durable consumer name [default ${DEFAULT_DURABLE}]
  --batch N              Messages per transaction [default 2000]
  -h, --help             Show this help
`;
