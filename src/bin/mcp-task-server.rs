//! `mcp-task-server`: an MCP server whose tools run as tasks, over stdio or Streamable HTTP.
//!
//! With no arguments it serves MCP on stdin/stdout, as MCP clients expect when they launch
//! a server; `--http ADDR` serves HTTP instead. `--demo` launches a copy of itself and
//! talks to it, printing the conversation.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use mcp_task_store::server::{demo, Server};
use mcp_task_store::{Durability, ExpiryPolicy, JournalConfig, Store, StoreConfig, StoreError};
use serde_json::{json, Value};

const HELP: &str = "\
mcp-task-server: an MCP server whose tools run as tasks, over stdio or Streamable HTTP.
It speaks both revisions of MCP tasks: 2025-11-25 (tasks in core) and the SEP-2663 tasks
extension (protocol 2026-07-28), chosen per connection or request.

USAGE:
    mcp-task-server [OPTIONS]            serve MCP on stdin/stdout (what MCP clients launch)
    mcp-task-server --http ADDR [OPTIONS] serve MCP at http://ADDR/mcp (e.g. 127.0.0.1:3000)
    mcp-task-server --demo [OPTIONS]     launch a server and show a conversation with it

Store settings (durations take units: 500ms, 90s, 10m, 2h):
    --default-ttl DURATION|none    TTL of tasks that request none; with none they get the
                                   cap [default: 1h, or the cap if lower]
    --max-ttl DURATION|none        cap on every task's TTL, requested or not; none: no cap
                                   but the built-in 100 years on a requested TTL (with
                                   --default-ttl none too, tasks that ask for no TTL are
                                   kept for good) [default: 24h, or --default-ttl if
                                   longer]
    --poll-interval DURATION       polling interval suggested to clients [default: 1s]
    --page-size N                  tasks per tasks/list page [default: 100]
    --max-tasks N                  most tasks the store holds, finished ones included until
                                   their TTL removes them [default: no limit]
    --max-tasks-per-session N      the same per HTTP 2025-11-25 session, and per identity
                                   for SEP-2663 tasks with --identity-header (otherwise
                                   stdio and SEP-2663 tasks are sessionless) [default: no
                                   limit]
    --expiry fail|remove           what happens to a running task whose TTL runs out:
                                   fail it (its tool is told to stop) and remove it after
                                   --expiry-grace, or remove it at once [default: fail]
    --expiry-grace DURATION        with --expiry fail: how long an expired task stays
                                   readable [default: 30s]
    --data-dir DIR                 keep a write-ahead journal in DIR: tasks survive restarts
                                   (with --durability fsync, every change is on disk before
                                   it is acknowledged; tasks still running at a restart are
                                   failed) [default: memory]
    --durability fsync|flush|none  with --data-dir: when a change is safe [default: fsync]
    --journal-salvage              with --data-dir: start even if the log is damaged,
                                   keeping what precedes the damage (the rest is set aside
                                   next to the log; changes in it are lost)

Server settings:
    --http ADDR                    serve Streamable HTTP on ADDR instead of stdio
    --allow-remote                 let --http bind a non-loopback address
    --allow-origin ORIGIN          with --http: let pages from ORIGIN (as a browser sends
                                   it, e.g. http://localhost:6274 for the MCP Inspector)
                                   use the server through CORS; repeat for more [default:
                                   none; other loopback pages get no CORS, other origins
                                   are refused with 403]
    --max-connections N            with --http: client connections open at once; event
                                   streams (sessions' GET streams and task subscriptions)
                                   take at most half [default: 1024]
    --max-sessions N               with --http: 2025-11-25 sessions open at once
                                   [default: 1024]
    --session-idle-timeout DURATION
                                   with --http: a 2025-11-25 session idle this long is
                                   ended and its live tasks cancelled [default: 30m]
    --max-body-bytes N             with --http: largest request body [default: 4194304]
    --max-sessions-per-identity N  with --identity-header: 2025-11-25 sessions one
                                   identity holds at once [default: 64]
    --identity-header NAME         with --http: each request's sender is the value of its
                                   header NAME (e.g. X-Forwarded-User), which a reverse
                                   proxy that authenticates clients sets; tasks and
                                   sessions are bound to it, and a request without it
                                   (or with it more than once) gets 401. Only with such a
                                   proxy in front, replacing the header whatever clients
                                   send [default: no identities, SEP-2663 task ids are
                                   bearer capabilities]
    --identity-challenge VALUE     with --identity-header: the WWW-Authenticate challenge
                                   its 401 carries, so that an MCP client can find where
                                   to sign in: 'Bearer resource_metadata=\"URL\"' with the
                                   URL of the OAuth protected resource metadata your
                                   proxy serves [default: Bearer]
    --promote-after DURATION       how long a SEP-2663 call of a task-optional tool runs
                                   inline before it becomes a task [default: 50ms]
    --workers N                    threads that run tools, at most 4096 [default: 16]
    --log LEVEL                    stderr log level: off, error, warn, info, debug, trace
                                   [default: info]
    -h, --help                     print this help
    -V, --version                  print the version

Tools: sleep{ms} (task optional), sleep_required{ms} (task required), fail{ms} (task
optional; ends with a tool error), count{to, ms} (task optional; reports `step i of n` as
its status message), echo{text} (never a task), ask{question} (task required; asks the
client through elicitation), and the conformance suite's fixtures greet{name},
slow_compute{seconds, label?}, failing_job, protocol_error_job, confirm_delete{filename},
multi_input and test_tool_with_task.
";

struct Options {
    store: StoreConfig,
    grace: Option<Duration>,
    remove_on_expiry: bool,
    workers: usize,
    log: log::LevelFilter,
    demo: bool,
    http: Option<std::net::SocketAddr>,
    allow_remote: bool,
    journal: Option<JournalConfig>,
    durability: Durability,
    salvage: bool,
    promote_after: Duration,
    http_flags: HttpFlags,
}

/// What the command line said of the HTTP transport's settings (each `None`: the default).
#[derive(Default)]
struct HttpFlags {
    allowed_origins: Vec<String>,
    max_connections: Option<usize>,
    max_sessions: Option<usize>,
    session_idle_timeout: Option<Duration>,
    max_body_bytes: Option<usize>,
    identity_header: Option<String>,
    identity_challenge: Option<String>,
    max_sessions_per_identity: Option<usize>,
}

impl HttpFlags {
    /// The first flag given, to refuse it when there is no `--http`.
    fn first_given(&self) -> Option<&'static str> {
        [
            (!self.allowed_origins.is_empty(), "--allow-origin"),
            (self.max_connections.is_some(), "--max-connections"),
            (self.max_sessions.is_some(), "--max-sessions"),
            (
                self.session_idle_timeout.is_some(),
                "--session-idle-timeout",
            ),
            (self.max_body_bytes.is_some(), "--max-body-bytes"),
            (self.identity_header.is_some(), "--identity-header"),
            (self.identity_challenge.is_some(), "--identity-challenge"),
            (
                self.max_sessions_per_identity.is_some(),
                "--max-sessions-per-identity",
            ),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// An origin as a browser sends it in `Origin`: `scheme://host[:port]`, nothing after (the
/// transport writes it as browsers do: lower case, no default port).
fn parse_origin(value: &str) -> Result<String, String> {
    let authority = value
        .split_once("://")
        .filter(|(scheme, _)| ["http", "https"].contains(&scheme.to_ascii_lowercase().as_str()))
        .map(|(_, authority)| authority);
    match authority {
        Some(host) if !host.is_empty() && !host.contains(['/', '?', '#', '*', '@']) => {
            Ok(value.to_string())
        }
        _ => Err(format!(
            "--allow-origin: '{value}' is not an origin such as http://localhost:6274 \
             (scheme, host and port only, no path or wildcard)"
        )),
    }
}

/// A header field name (an RFC 9110 token).
fn parse_header_name(flag: &str, value: &str) -> Result<String, String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if value.is_empty() || !value.chars().all(token) {
        return Err(format!(
            "{flag}: '{value}' is not a header name such as X-Forwarded-User"
        ));
    }
    Ok(value.to_string())
}

/// A `WWW-Authenticate` challenge (RFC 9110 §11.6.1): an auth scheme, perhaps followed by
/// parameters, on one line.
fn parse_challenge(flag: &str, value: &str) -> Result<String, String> {
    let scheme = value.split(' ').next().unwrap_or_default();
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if scheme.is_empty() || !scheme.chars().all(token) || value.chars().any(char::is_control) {
        return Err(format!(
            "{flag}: '{}' is not a challenge such as Bearer or \
             Bearer resource_metadata=\"https://...\"",
            value.escape_debug()
        ));
    }
    Ok(value.to_string())
}

fn parse_duration(flag: &str, value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("{flag}: '{value}' is not a duration ({e}); try 500ms, 90s or 10m"))
}

fn parse_count(flag: &str, value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .map_err(|_| format!("{flag}: '{value}' is not a whole number"))
}

/// A limit of at least 1: leaving the flag out is how to say "no limit".
fn parse_limit_count(flag: &str, value: &str) -> Result<usize, String> {
    match parse_count(flag, value)? {
        0 => Err(format!(
            "{flag}: must be at least 1 (leave it out for no limit)"
        )),
        n => Ok(n),
    }
}

/// A count for an HTTP transport limit, which always has one: left out, it is the
/// transport's default (see --help), never "no limit".
fn parse_http_count(flag: &str, value: &str) -> Result<usize, String> {
    match parse_count(flag, value)? {
        0 => Err(format!(
            "{flag}: must be at least 1 (leave it out for the default)"
        )),
        n => Ok(n),
    }
}

/// Most tool threads `--workers` may ask for: each is a thread started up front, and far
/// more than this fails to start (or exhausts memory) rather than serving anything faster.
const MAX_WORKERS: usize = 4096;

/// The flag that sets a store configuration field, so a refusal by the store's validation
/// names what the user typed.
fn flag_of(field: &str) -> Option<&'static str> {
    Some(match field {
        "default_ttl" => "--default-ttl",
        "max_ttl" => "--max-ttl",
        "poll_interval" => "--poll-interval",
        "page_size" => "--page-size",
        "max_tasks" => "--max-tasks",
        "max_tasks_per_session" => "--max-tasks-per-session",
        "expiry" => "--expiry-grace",
        _ => return None,
    })
}

/// A TTL of at least 1 ms, or `none` for no limit. Checked here, not only by the store's
/// validation: the other TTL is derived from it, and an error must name this flag.
fn parse_limit(flag: &str, value: &str) -> Result<Option<Duration>, String> {
    if value == "none" {
        return Ok(None);
    }
    let ttl = parse_duration(flag, value)?;
    if ttl < Duration::from_millis(1) {
        return Err(format!(
            "{flag}: '{value}' is shorter than 1 ms (or use none; see --help)"
        ));
    }
    Ok(Some(ttl))
}

/// TTL of tasks that request none, unless `--default-ttl` says otherwise. The library keeps
/// tasks without a TTL forever, as the official SDKs do; a long-running server would then
/// hold every finished task (and every task of every ended HTTP session) for good, so the
/// binary follows the spec's advice to prefer short TTLs.
const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// Cap on every TTL, unless `--max-ttl` says otherwise (the spec asks servers to cap it).
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    // What the command line said of the TTLs (`Some(None)`: `none`), applied at the end.
    let (mut default_ttl, mut max_ttl): (Option<Option<Duration>>, Option<Option<Duration>>) =
        (None, None);
    let mut durability_given = false;
    let mut options = Options {
        store: StoreConfig::default(),
        grace: None,
        remove_on_expiry: false,
        workers: 16,
        log: log::LevelFilter::Info,
        demo: false,
        http: None,
        allow_remote: false,
        journal: None,
        durability: Durability::Fsync,
        salvage: false,
        promote_after: Duration::from_millis(50),
        http_flags: HttpFlags::default(),
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        // A switch given a value (`--allow-remote=no`) must not be read as the bare switch.
        let switches = [
            "-h",
            "--help",
            "-V",
            "--version",
            "--demo",
            "--allow-remote",
            "--journal-salvage",
        ];
        if inline.is_some() && switches.contains(&flag.as_str()) {
            return Err(format!("{flag} takes no value"));
        }
        match flag.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(None);
            }
            "-V" | "--version" => {
                println!("mcp-task-server {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            "--demo" => options.demo = true,
            "--http" => {
                let text = value()?;
                options.http = Some(text.parse().map_err(|_| {
                    format!("--http: '{text}' is not an address such as 127.0.0.1:3000")
                })?)
            }
            "--allow-remote" => options.allow_remote = true,
            "--allow-origin" => {
                let origin = parse_origin(&value()?)?;
                options.http_flags.allowed_origins.push(origin);
            }
            "--max-connections" => {
                let n = parse_http_count(&flag, &value()?)?;
                options.http_flags.max_connections = Some(n);
            }
            "--max-sessions" => {
                let n = parse_http_count(&flag, &value()?)?;
                options.http_flags.max_sessions = Some(n);
            }
            "--session-idle-timeout" => {
                let idle = parse_duration(&flag, &value()?)?;
                if idle.is_zero() {
                    return Err(format!("{flag}: must be longer than 0"));
                }
                options.http_flags.session_idle_timeout = Some(idle);
            }
            "--max-body-bytes" => {
                let n = parse_http_count(&flag, &value()?)?;
                options.http_flags.max_body_bytes = Some(n);
            }
            "--max-sessions-per-identity" => {
                let n = parse_http_count(&flag, &value()?)?;
                options.http_flags.max_sessions_per_identity = Some(n);
            }
            "--identity-header" => {
                let name = parse_header_name(&flag, &value()?)?;
                options.http_flags.identity_header = Some(name);
            }
            "--identity-challenge" => {
                let challenge = parse_challenge(&flag, &value()?)?;
                options.http_flags.identity_challenge = Some(challenge);
            }
            "--data-dir" => {
                let dir = value()?;
                if dir.is_empty() {
                    return Err("--data-dir needs a value".to_string());
                }
                options.journal = Some(JournalConfig::new(dir));
            }
            "--durability" => {
                durability_given = true;
                options.durability = match value()?.as_str() {
                    "fsync" => Durability::Fsync,
                    "flush" => Durability::Flush,
                    "none" => Durability::None,
                    other => {
                        return Err(format!(
                            "--durability: '{other}' is not fsync, flush or none"
                        ))
                    }
                }
            }
            "--journal-salvage" => options.salvage = true,
            "--promote-after" => options.promote_after = parse_duration(&flag, &value()?)?,
            "--default-ttl" => default_ttl = Some(parse_limit(&flag, &value()?)?),
            "--max-ttl" => max_ttl = Some(parse_limit(&flag, &value()?)?),
            "--poll-interval" => options.store.poll_interval = parse_duration(&flag, &value()?)?,
            "--page-size" => options.store.page_size = parse_count(&flag, &value()?)?,
            "--max-tasks" => options.store.max_tasks = Some(parse_limit_count(&flag, &value()?)?),
            "--max-tasks-per-session" => {
                options.store.max_tasks_per_session = Some(parse_limit_count(&flag, &value()?)?)
            }
            "--expiry" => match value()?.as_str() {
                "fail" => options.remove_on_expiry = false,
                "remove" => options.remove_on_expiry = true,
                other => {
                    return Err(format!(
                        "--expiry: '{other}' is neither 'fail' nor 'remove'"
                    ))
                }
            },
            "--expiry-grace" => options.grace = Some(parse_duration(&flag, &value()?)?),
            "--workers" => {
                options.workers = parse_count(&flag, &value()?)?;
                if !(1..=MAX_WORKERS).contains(&options.workers) {
                    return Err(format!("--workers: must be between 1 and {MAX_WORKERS}"));
                }
            }
            "--log" => {
                options.log = value()?
                    .parse()
                    .map_err(|_| "--log: use off, error, warn, info, debug or trace".to_string())?
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if let (Some(Some(default)), Some(Some(cap))) = (default_ttl, max_ttl) {
        if default > cap {
            return Err(format!(
                "--default-ttl {} is longer than --max-ttl {}",
                humantime::format_duration(default),
                humantime::format_duration(cap)
            ));
        }
    }
    // The built-in TTLs give way to the ones given: a lower cap lowers the default, a longer
    // default raises the cap.
    options.store.max_ttl = max_ttl.unwrap_or(Some(match default_ttl {
        Some(Some(ttl)) => ttl.max(MAX_TTL),
        _ => MAX_TTL,
    }));
    options.store.default_ttl = default_ttl.unwrap_or(Some(match options.store.max_ttl {
        Some(cap) => cap.min(DEFAULT_TTL),
        None => DEFAULT_TTL,
    }));
    options.store.expiry = match (options.remove_on_expiry, options.grace) {
        (true, Some(_)) => {
            return Err("--expiry-grace has no effect with --expiry remove".to_string())
        }
        (true, None) => ExpiryPolicy::Remove,
        (false, Some(grace)) => ExpiryPolicy::Fail { grace },
        (false, None) => ExpiryPolicy::default(),
    };
    options.store.validate().map_err(|e| match e {
        StoreError::InvalidConfig { field, reason } => match flag_of(field) {
            Some(flag) => format!("{flag}: {reason}"),
            None => format!("{field} {reason}"),
        },
        other => other.to_string(),
    })?;
    match &mut options.journal {
        Some(journal) => {
            journal.durability = options.durability;
            journal.salvage = options.salvage;
        }
        None if options.salvage => {
            return Err("--journal-salvage has no effect without --data-dir".to_string())
        }
        None if durability_given => {
            return Err("--durability has no effect without --data-dir".to_string())
        }
        None => {}
    }
    match options.http {
        // The demo talks to its server over the server's stdin and stdout.
        Some(_) if options.demo => {
            return Err("--demo talks to its server over stdio: leave out --http".to_string())
        }
        Some(addr) if !addr.ip().is_loopback() && !options.allow_remote => {
            return Err(format!(
                "--http {addr} is not a loopback address; add --allow-remote to serve it"
            ));
        }
        None if options.allow_remote => {
            return Err("--allow-remote has no effect without --http".to_string())
        }
        None => {
            if let Some(flag) = options.http_flags.first_given() {
                return Err(format!("{flag} has no effect without --http"));
            }
        }
        _ => {}
    }
    let flags = &options.http_flags;
    if flags.identity_header.is_none() {
        let needing = [
            (
                flags.max_sessions_per_identity.is_some(),
                "--max-sessions-per-identity",
            ),
            (flags.identity_challenge.is_some(), "--identity-challenge"),
        ];
        if let Some((_, flag)) = needing.into_iter().find(|(given, _)| *given) {
            return Err(format!("{flag} has no effect without --identity-header"));
        }
    }
    Ok(Some(options))
}

/// Writes log records to stderr as `mcp-task-server: message`, so stdout stays protocol only.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "mcp-task-server: {}",
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse_args(raw.clone().into_iter()) {
        Ok(Some(options)) => options,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mcp-task-server: {message}\nTry 'mcp-task-server --help'.");
            return ExitCode::from(2);
        }
    };
    let _ = log::set_logger(&StderrLogger);
    log::set_max_level(options.log);
    if options.demo {
        let server_args: Vec<String> = raw.into_iter().filter(|a| a != "--demo").collect();
        return match run_demo(&server_args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("mcp-task-server --demo: {message}");
                ExitCode::FAILURE
            }
        };
    }
    let mut builder = Server::builder()
        .workers(options.workers)
        .promote_after(options.promote_after);
    // Without a journal the server makes its own store; with one, it opens (and recovers)
    // the journaled store first and keeps it alive for as long as it serves.
    let _journaled = match options.journal {
        None => {
            builder = builder.store_config(options.store);
            None
        }
        Some(journal) => {
            let dir = journal.dir.clone();
            match Store::builder()
                .config(options.store)
                .journal(journal)
                .build()
            {
                Ok(store) => {
                    log::info!("tasks are journaled in {}", dir.display());
                    builder = builder.store(std::sync::Arc::new(store.handle()));
                    Some(store)
                }
                Err(e) => {
                    eprintln!("mcp-task-server: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    let server = match builder.build() {
        Ok(server) => server,
        Err(e) => {
            eprintln!("mcp-task-server: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(addr) = options.http {
        return serve_http(server, addr, options.http_flags);
    }
    log::info!("serving MCP tasks (2025-11-25 and SEP-2663) on stdio");
    match server.serve_stdio() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-task-server: stdio failed: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "http")]
fn serve_http(server: Server, addr: std::net::SocketAddr, flags: HttpFlags) -> ExitCode {
    use mcp_task_store::server::{HttpOptions, HttpServer, RequestHead, Unauthorized};
    let defaults = HttpOptions::default();
    // A 401 names a challenge (RFC 9110 §15.5.2): the proxy's, when the operator gives it.
    let challenge = (flags.identity_challenge).unwrap_or_else(|| "Bearer".to_string());
    let authenticate = flags.identity_header.map(|name| {
        let hook = move |head: &RequestHead<'_>| match head.header(&name) {
            Some(identity) if !identity.is_empty() => Ok(identity.to_string()),
            _ => Err(
                Unauthorized::new(format!("the {name} header is required, once"))
                    .with_challenge(challenge.clone()),
            ),
        };
        std::sync::Arc::new(hook) as mcp_task_store::server::Authenticate
    });
    let options = HttpOptions {
        authenticate,
        allowed_origins: flags.allowed_origins,
        max_connections: flags.max_connections.unwrap_or(defaults.max_connections),
        max_sessions: flags.max_sessions.unwrap_or(defaults.max_sessions),
        max_sessions_per_identity: (flags.max_sessions_per_identity)
            .unwrap_or(defaults.max_sessions_per_identity),
        session_idle_timeout: (flags.session_idle_timeout).unwrap_or(defaults.session_idle_timeout),
        max_body_bytes: flags.max_body_bytes.unwrap_or(defaults.max_body_bytes),
        ..defaults
    };
    match HttpServer::bind(server, addr, options) {
        Ok(http) => {
            log::info!("serving MCP tasks at http://{}/mcp", http.local_addr());
            http.join();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mcp-task-server: cannot serve HTTP on {addr}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "http"))]
fn serve_http(_: Server, _: std::net::SocketAddr, _: HttpFlags) -> ExitCode {
    eprintln!("mcp-task-server: built without the `http` feature");
    ExitCode::from(2)
}

/// The demo's side of the conversation: sends requests and prints both directions.
struct DemoClient {
    to_server: std::process::ChildStdin,
    from_server: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl DemoClient {
    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        println!("client -> {request}");
        writeln!(self.to_server, "{request}").map_err(|e| e.to_string())?;
        loop {
            let mut line = String::new();
            if self
                .from_server
                .read_line(&mut line)
                .map_err(|e| e.to_string())?
                == 0
            {
                return Err("the server closed its output".into());
            }
            let message: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            println!("server <- {}", line.trim_end());
            if message.get("id") == Some(&json!(id)) {
                return Ok(message);
            }
        }
    }
}

fn task_id_of(created: &Value) -> Result<String, String> {
    created
        .pointer("/result/task/taskId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("no task in the reply: {created}"))
}

/// A scripted client: launches this binary as a server and prints both sides.
fn run_demo(server_args: &[String]) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // Quiet by default, so the conversation reads clearly; a --log given wins (the last
    // one counts).
    let mut child = Command::new(exe)
        .args(["--log", "warn"])
        .args(server_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot launch the server: {e}"))?;
    let mut client = DemoClient {
        to_server: child.stdin.take().ok_or("no stdin")?,
        from_server: BufReader::new(child.stdout.take().ok_or("no stdout")?),
        next_id: 0,
    };
    println!("# 1. Handshake: the server declares task support.");
    client.call(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "demo", "version": "1"}}),
    )?;
    println!("\n# 2. The tools, with their execution.taskSupport.");
    client.call("tools/list", json!({}))?;
    println!(
        "\n# 3. A task-augmented call returns a task at once; the work runs in the background."
    );
    let created = client.call(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 1500}, "task": {"ttl": 60000}}),
    )?;
    let id = task_id_of(&created)?;
    println!("\n# 4. Poll it (status notifications may arrive in between).");
    client.call("tasks/get", json!({"taskId": id}))?;
    println!("\n# 5. tasks/result blocks until the task is done, then returns the tool's result.");
    client.call("tasks/result", json!({"taskId": id}))?;
    println!("\n# 6. Cancel a long task; cancelling it again is an error (-32602).");
    let long = client.call(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 600000}, "task": {}}),
    )?;
    let long_id = task_id_of(&long)?;
    client.call("tasks/cancel", json!({"taskId": long_id}))?;
    client.call("tasks/cancel", json!({"taskId": long_id}))?;
    println!("\n# 7. Every task of this client, one page at a time.");
    client.call("tasks/list", json!({}))?;
    drop(client); // closes the server's stdin: it exits
    let _ = child.wait();
    println!("\nTo serve a real MCP client, launch `mcp-task-server` (no arguments) from its configuration.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_challenge, parse_header_name, parse_origin};

    #[test]
    fn only_challenges_are_taken() {
        for challenge in [
            "Bearer",
            r#"Bearer resource_metadata="https://mcp.example/.well-known/x""#,
            "Basic realm=\"x\", charset=\"UTF-8\"",
        ] {
            assert_eq!(parse_challenge("--f", challenge).as_deref(), Ok(challenge));
        }
        for refused in [
            "",
            " Bearer",
            "Bear\"er",
            "Bearer\r\nX-Injected: 1",
            "Bearer\tx",
        ] {
            assert!(parse_challenge("--f", refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn only_header_names_are_taken() {
        for name in ["X-Forwarded-User", "x_user", "X-Auth-Request-Email"] {
            assert_eq!(parse_header_name("--f", name).as_deref(), Ok(name));
        }
        for refused in ["", "X User", "X-User:", "X-Üser", "X\r\nY"] {
            assert!(parse_header_name("--f", refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn only_origins_are_taken() {
        for origin in [
            "http://localhost:6274",
            "HTTPS://App.Example:443",
            "http://[::1]",
        ] {
            assert_eq!(parse_origin(origin).as_deref(), Ok(origin));
        }
        for refused in [
            "localhost:6274",
            "ftp://x",
            "http://",
            "http://x/",
            "http://x?y",
            "*",
            "http://*.x",
            "http://u@x",
        ] {
            assert!(parse_origin(refused).is_err(), "{refused}");
        }
    }
}
