//! The operator's commands on a Redis server (`--db redis://…`), on a throwaway server:
//! the same JSON and exit statuses as on a file, the server's clock, the function library
//! printed for an operator, moving records between a file and the server, a server whose
//! settings are refused (and, accepted, named by the proxy's /healthz and /metrics), and
//! two proxies on one server, three proxies on a three-master cluster.

mod common;

#[path = "../../store/tests/common/redis.rs"]
mod server;

use std::path::PathBuf;
use std::time::Duration;

use common::Idem;
use common::http::{Proxy, Upstream, get, post};
use serde_json::json;
use server::Server;

/// An `idem` whose `--db` is `server`.
fn on(server: &Server) -> Idem {
    Idem {
        db: PathBuf::from(server.url()),
        ..Idem::new()
    }
}

#[test]
fn the_receiver_commands_work_on_redis_as_on_a_file() {
    let server = Server::start();
    let idem = on(&server);

    let run = idem.run(&["--json", "begin", "shop", "charge", "k-1", "--payload", "-"]);
    run.code(0);
    let claimed = run.json();
    assert_eq!(claimed["decision"], "claimed");
    let generation = claimed["generation"].as_u64().unwrap().to_string();
    idem.run(&["--json", "begin", "shop", "charge", "k-1"])
        .code(4);
    idem.run_stdin(
        &["--json", "begin", "shop", "charge", "k-1", "--payload", "-"],
        b"other",
    )
    .code(3);
    let receipt = idem.file("receipt.bin", b"receipt \x00\xff");
    idem.run(&[
        "--json",
        "complete",
        "shop",
        "charge",
        "k-1",
        "--generation",
        &generation,
        "--code",
        "201",
        "--outcome",
        &receipt,
    ])
    .code(0);
    let replay = idem.run(&["--json", "begin", "shop", "charge", "k-1"]);
    replay.code(0);
    let replay = replay.json();
    assert_eq!(
        (&replay["decision"], &replay["code"], &replay["outcome_b64"]),
        (&json!("replay"), &json!(201), &json!("cmVjZWlwdCAA/w=="))
    );
    // A stale generation: exit 6.
    idem.run(&[
        "release",
        "shop",
        "charge",
        "k-1",
        "--generation",
        &generation,
    ])
    .code(6);
    let stats = idem.run(&["--json", "stats"]);
    stats.code(0);
    assert_eq!(stats.json()["succeeded"], json!(1));
    let listed = idem.run(&["--json", "list", "--state", "succeeded"]);
    listed.code(0);
    assert!(listed.stdout.contains("\"k-1\""), "{}", listed.stdout);

    // The server's clock is the fleet's: --now is refused, before anything is written.
    idem.run(&["--now", "0", "begin", "shop", "charge", "k-9"])
        .code(2)
        .one_error_line(&["--now", "Redis"]);
    idem.run(&["get", "shop", "charge", "k-9"]).code(7);
    // A command of the file alone names why.
    idem.run(&["check"])
        .code(2)
        .one_error_line(&["--db", "Redis", "store file"]);

    // The function library an operator loads by hand.
    let library = idem.run(&["schema"]);
    library.code(0);
    assert!(
        library.stdout.starts_with("#!lua name=idem"),
        "{}",
        library.stdout
    );

    // Records move from the server to a file and back unchanged.
    let exported = idem.path("redis.jsonl");
    let exported = exported.to_str().unwrap();
    idem.run(&["export", "--out", exported]).code(0);
    let file = Idem::new();
    file.run(&["import", exported]).code(0);
    let again = file.path("again.jsonl");
    file.run(&["export", "--out", again.to_str().unwrap()])
        .code(0);
    let other_server = Server::start();
    let other = on(&other_server);
    let run = other.run(&["--json", "import", again.to_str().unwrap()]);
    run.code(0);
    assert_eq!(run.json()["imported"], 1);
    let replay = other.run(&["--json", "begin", "shop", "charge", "k-1"]);
    assert_eq!(replay.json()["outcome_b64"], json!("cmVjZWlwdCAA/w=="));
}

#[test]
fn a_server_that_can_lose_an_answer_is_refused_unless_the_url_accepts_it() {
    let server = Server::start_with(&["--appendfsync everysec"]);
    let idem = on(&server);
    idem.run(&["begin", "t", "o", "k"])
        .code(1)
        .one_error_line(&[
            "appendfsync is everysec",
            "appendfsync always",
            "accept_unsafe_durability=true",
        ]);
    assert_eq!(server.cli(&["DBSIZE"]), "0", "nothing was written");
    let accepted = Idem {
        db: PathBuf::from(format!("{}?accept_unsafe_durability=true", server.url())),
        ..Idem::new()
    };
    accepted.run(&["begin", "t", "o", "k"]).code(0);

    // A proxy that runs so says it where an operator looks: /healthz and /metrics.
    let upstream = Upstream::start(Duration::from_millis(1));
    let proxy = Proxy::start(&accepted, &upstream.url(), &["--tenant", "shop"]);
    let health = get(proxy.admin, "/healthz");
    assert_eq!(
        (health.status, health.body.as_str()),
        (
            200,
            "ready\ndurability risk accepted: appendfsync is everysec (accept_unsafe_durability)\n"
        )
    );
    let metrics = get(proxy.admin, "/metrics").body;
    assert!(
        metrics.contains("\nidem_proxy_durability_risk_accepted 1\n"),
        "{metrics}"
    );
    // And one on a server with the required settings says nothing of the kind.
    let safe = Server::start();
    let proxy = Proxy::start(&on(&safe), &upstream.url(), &["--tenant", "shop"]);
    let health = get(proxy.admin, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ready\n"));
    let metrics = get(proxy.admin, "/metrics").body;
    assert!(
        metrics.contains("\nidem_proxy_durability_risk_accepted 0\n"),
        "{metrics}"
    );
}

#[test]
fn two_proxies_on_one_server_run_a_request_once_and_both_replay_it() {
    let server = Server::start();
    let idem = on(&server);
    let upstream = Upstream::start(Duration::from_millis(1));
    let proxies: Vec<Proxy> = (0..2)
        .map(|_| Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]))
        .collect();
    let headers = [("Idempotency-Key", "\"order-1\"")];
    let first = post(
        proxies[0].address,
        "/orders",
        &headers,
        "{\"key\":\"order-1\"}",
    );
    assert_eq!(first.status, 201, "{}", first.problem());
    let replay = post(
        proxies[1].address,
        "/orders",
        &headers,
        "{\"key\":\"order-1\"}",
    );
    assert_eq!((replay.status, &replay.body), (first.status, &first.body));
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(upstream.executions("\"order-1\""), 1, "ran once");
}

#[test]
fn entities_and_tokens_work_on_redis() {
    let server = Server::start();
    let idem = on(&server);
    let machine = idem.file(
        "payment.json",
        br#"{"states": ["created", "paid"], "initial": "created", "moves": [["created", "paid"]]}"#,
    );
    let mv = |to: &str, extra: &[&str]| {
        let mut args = vec![
            "--json",
            "transition",
            "shop",
            "payment",
            "p-1",
            to,
            "--machine",
            &machine,
        ];
        args.extend_from_slice(extra);
        idem.run(&args)
    };
    let created = mv("created", &[]);
    created.code(0);
    assert_eq!(created.json()["version"], json!(1));
    mv("paid", &["--expected-version", "1"]).code(0);
    let stale = mv("paid", &["--expected-version", "1"]);
    stale.code(0);
    assert_eq!(stale.json()["decision"], "already_there");
    let back = mv("created", &[]);
    back.code(6);
    assert_eq!(back.json()["decision"], "illegal");
    let listed = idem.run(&["--json", "entity", "list", "payment", "--state", "paid"]);
    listed.code(0);
    assert!(listed.stdout.contains("\"p-1\""), "{}", listed.stdout);
    // A one-time token, issued once for an intent, used once.
    let issue = || {
        let run = idem.run(&[
            "--json", "token", "issue", "shop", "redeem", "--ttl", "15m", "--intent", "order-9",
        ]);
        run.code(0);
        run.json()["token"].as_str().unwrap().to_owned()
    };
    let token = issue();
    assert_eq!(issue(), token, "the same intent's token again");
    let consume = || {
        idem.run(&[
            "token",
            "consume",
            "shop",
            "redeem",
            &token,
            "--",
            "sh",
            "-c",
            "echo redeemed",
        ])
    };
    let first = consume();
    first.code(0);
    assert_eq!(first.stdout, "redeemed\n");
    let again = consume();
    again.code(0);
    assert_eq!(again.stdout, "redeemed\n", "replayed, not run again");
}

#[test]
fn three_proxies_on_a_three_master_cluster_run_each_key_once() {
    let cluster = server::start_cluster(3);
    let upstream = Upstream::start(Duration::from_millis(5));
    // A proxy on each node, each told only its own node: the cluster leads each to the
    // master of idem's slot.
    let proxies: Vec<Proxy> = cluster
        .iter()
        .map(|node| {
            let idem = Idem {
                db: PathBuf::from(format!("{}?cluster=true", node.url())),
                ..Idem::new()
            };
            Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"])
        })
        .collect();
    let addresses: Vec<_> = proxies.iter().map(|p| p.address).collect();
    for n in 0..20 {
        let key = format!("\"order-{n}\"");
        let body = format!("{{\"order\":{n}}}");
        // The same key from the three proxies at once.
        let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
            let sent: Vec<_> = addresses
                .iter()
                .map(|address| {
                    let (key, body) = (&key, &body);
                    scope.spawn(move || {
                        let answer = post(*address, "/orders", &[("Idempotency-Key", key)], body);
                        (answer.status, answer.body)
                    })
                })
                .collect();
            sent.into_iter().map(|s| s.join().unwrap()).collect()
        });
        assert!(
            answers
                .iter()
                .all(|(status, _)| [201, 409].contains(status)),
            "{key}: {answers:?}"
        );
        // Settled: every proxy replays the one answer.
        let first = loop {
            let answer = post(addresses[0], "/orders", &[("Idempotency-Key", &key)], &body);
            if answer.status != 409 {
                break answer;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(first.status, 201, "{key}: {}", first.problem());
        for address in &addresses[1..] {
            let replay = post(*address, "/orders", &[("Idempotency-Key", &key)], &body);
            assert_eq!((replay.status, &replay.body), (201, &first.body), "{key}");
        }
        assert_eq!(upstream.executions(&key), 1, "{key} ran once");
    }
    // Every master was given idem's library; the records live on the one that holds the
    // slot of {idem}.
    let holders: Vec<usize> = cluster
        .iter()
        .map(|node| {
            assert!(
                node.cli(&["FUNCTION", "LIST"]).contains("idem"),
                "a master without the library"
            );
            node.cli(&["DBSIZE"]).parse().unwrap()
        })
        .collect();
    assert_eq!(
        holders.iter().filter(|&&keys| keys > 0).count(),
        1,
        "{holders:?}"
    );
}

/// A password from a file: the proxy runs on a server that requires one, and the
/// password is nowhere in its command line; a wrong one, one in the URL too, or one
/// with a file store are refused, and no message shows the password.
#[test]
fn a_password_file_keeps_the_password_off_the_command_line() {
    let secret = "pa55-w0rd:with@signs";
    let server = Server::start_with(&[&format!("--requirepass {secret}")]);
    let idem = on(&server);
    let file = idem.file("db-password", format!("{secret}\n").as_bytes());

    // Without it the server refuses the connection.
    let refused = idem.run(&["begin", "t", "o", "k"]);
    refused.code(1).one_error_line(&["--db"]);

    let upstream = Upstream::start(Duration::from_millis(1));
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--db-password-file", &file],
    );
    let headers = [("Idempotency-Key", "\"order-1\"")];
    let first = post(proxy.address, "/orders", &headers, r#"{"item":"tea"}"#);
    let again = post(proxy.address, "/orders", &headers, r#"{"item":"tea"}"#);
    assert_eq!((first.status, again.status), (201, 201));
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(upstream.executions("\"order-1\""), 1);
    let pid = proxy.child.id();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains("--db-password-file"), "{cmdline}");
    assert!(!cmdline.contains(secret), "{cmdline}");
    let ps = std::process::Command::new("ps")
        .args(["-ww", "-o", "args=", "-p", &pid.to_string()])
        .output()
        .unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(ps.contains("proxy"), "ps shows the proxy: {ps}");
    assert!(!ps.contains(secret), "{ps}");

    // The same file through the environment, for the receiver commands.
    let mut begin = idem.command(&["--json", "begin", "t", "o", "k"]);
    begin.env("IDEM_DB_PASSWORD_FILE", &file);
    let begun = common::Run::of(begin.output().unwrap());
    begun.code(0);
    assert_eq!(begun.json()["decision"], "claimed");

    let wrong = idem.file("wrong-password", b"not-it");
    let run = idem.run(&["--db-password-file", &wrong, "begin", "t", "o", "k2"]);
    run.code(1).one_error_line(&["--db"]);
    assert!(!run.stderr.contains("not-it"), "{}", run.stderr);
    let twice = Idem {
        db: PathBuf::from(format!("redis://:{secret}@127.0.0.1:{}/0", server.port())),
        ..Idem::new()
    };
    let run = twice.run(&["--db-password-file", &file, "begin", "t", "o", "k2"]);
    run.code(2)
        .one_error_line(&["password of its own", "one place"]);
    assert!(!run.stderr.contains(secret), "{}", run.stderr);
    let empty = idem.file("empty", b"\n");
    idem.run(&["--db-password-file", &empty, "begin", "t", "o", "k2"])
        .code(2)
        .one_error_line(&["--db-password-file", "is empty"]);
    let on_file = Idem::new();
    on_file
        .run(&["--db-password-file", &file, "begin", "t", "o", "k2"])
        .code(2)
        .one_error_line(&["a store file has none"]);
    assert!(!on_file.db.exists(), "nothing was made");
    // The variable, set for a machine's databases, leaves its commands on files alone.
    let mut begin = on_file.command(&["begin", "t", "o", "k2"]);
    begin.env("IDEM_DB_PASSWORD_FILE", &file);
    common::Run::of(begin.output().unwrap()).code(0);
}
