//! The operator's commands on a PostgreSQL database (`--db postgres://…`), on a
//! throwaway server of each test's own: the same JSON and exit statuses as on a file,
//! the database's clock, and moving records between a file and the database.

mod common;

#[path = "../../store/tests/common/postgres.rs"]
mod server;

use std::path::PathBuf;

use common::Idem;
use serde_json::json;
use server::Server;

/// An `idem` whose `--db` is the database `name` on `server`.
fn on(server: &Server, name: &str) -> Idem {
    let idem = Idem::new();
    Idem {
        db: PathBuf::from(format!(
            "postgres://postgres@127.0.0.1:{}/{name}",
            server.port()
        )),
        ..idem
    }
}

#[test]
fn the_receiver_commands_work_on_a_database_as_on_a_file() {
    let server = Server::start();
    let idem = on(&server, "postgres");

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

    // Unknown, then resolved.
    let run = idem.run(&["--json", "begin", "shop", "charge", "k-2"]);
    let g2 = run.json()["generation"].as_u64().unwrap().to_string();
    assert!(g2.parse::<u64>().unwrap() > generation.parse::<u64>().unwrap());
    idem.run(&["mark-unknown", "shop", "charge", "k-2", "--generation", &g2])
        .code(0);
    idem.run(&["begin", "shop", "charge", "k-2"]).code(5);
    idem.run(&[
        "resolve", "shop", "charge", "k-2", "--failed", "--code", "402",
    ])
    .code(0);

    let get = idem.run(&["--json", "get", "shop", "charge", "k-2"]);
    get.code(0);
    assert_eq!(get.json()["state"], "failed");
    idem.run(&["get", "shop", "charge", "nobody"]).code(7);
    let list = idem.run(&["--json", "list", "--state", "succeeded"]);
    list.code(0);
    let lines = list.json_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["key"], "k-1");
    let stats = idem.run(&["--json", "stats"]);
    stats.code(0);
    let stats = stats.json();
    assert_eq!(
        (&stats["succeeded"], &stats["failed"]),
        (&json!(1), &json!(1))
    );

    // exec runs the program once; a retry replays its stdout and status.
    let counter = idem.path("runs");
    let script = format!("echo run >> {}; echo paid; exit 0", counter.display());
    for _ in 0..2 {
        let run = idem.run(&["exec", "shop", "pay", "p-1", "--", "sh", "-c", &script]);
        run.code(0);
        assert_eq!(run.stdout, "paid\n");
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "run\n");

    let dry = idem.run(&["--json", "sweep", "--dry-run"]);
    dry.code(0);
    assert_eq!(dry.json()["removed"], 0);

    // The database's clock is the fleet's: --now is refused, before anything is written.
    idem.run(&["--now", "0", "begin", "shop", "charge", "k-9"])
        .code(2)
        .one_error_line(&["--now", "PostgreSQL"]);
    idem.run(&["get", "shop", "charge", "k-9"]).code(7);
    // A command of the file alone names why.
    idem.run(&["check"])
        .code(2)
        .one_error_line(&["--db", "PostgreSQL", "store file"]);
}

#[test]
fn records_move_between_a_file_and_a_database_with_export_and_import() {
    let server = Server::start();
    let file = Idem::new();
    for key in ["a", "b", "c"] {
        let g = common::claim(&file, common::T0, key).to_string();
        if key != "c" {
            file.at(common::T0, &["complete", "t", "o", key, "--generation", &g])
                .code(0);
        }
    }
    let exported = file.path("box.jsonl");
    let exported = exported.to_str().unwrap();
    file.run(&["export", "--out", exported]).code(0);

    let db = on(&server, "postgres");
    let run = db.run(&["--json", "import", exported]);
    run.code(0);
    assert_eq!(run.json()["imported"], 3);
    let back = db.path("back.jsonl");
    let back = back.to_str().unwrap();
    db.run(&["export", "--out", back]).code(0);

    let restored = Idem::new();
    restored.run(&["import", back]).code(0);
    let again = restored.path("again.jsonl");
    restored
        .run(&["export", "--out", again.to_str().unwrap()])
        .code(0);
    assert_eq!(
        std::fs::read_to_string(exported).unwrap(),
        std::fs::read_to_string(&again).unwrap(),
        "file, database, file: the same export"
    );
}

#[test]
fn a_database_that_cannot_be_used_is_named_and_nothing_is_written() {
    let server = Server::start();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = Idem {
        db: PathBuf::from(format!("postgres://postgres@127.0.0.1:{closed}/postgres")),
        ..Idem::new()
    };
    nowhere
        .run(&["begin", "t", "o", "k"])
        .code(1)
        .one_error_line(&["--db", "connecting to the database"]);

    // Reading a database without idem's schema does not create it.
    let idem = on(&server, "postgres");
    idem.run(&["stats"])
        .code(1)
        .one_error_line(&["no idem schema", "idem schema"]);
    let schema = idem.run(&["schema"]);
    schema.code(0);
    assert!(
        schema
            .stdout
            .contains("CREATE TABLE IF NOT EXISTS idem_records")
    );
    // begin creates it.
    idem.run(&["begin", "t", "o", "k"]).code(0);
    idem.run(&["stats"]).code(0);
}

#[test]
fn a_newer_schema_is_refused_naming_both_versions() {
    let server = Server::start();
    let idem = on(&server, "postgres");
    idem.run(&["begin", "t", "o", "k"]).code(0);
    assert!(common::run_sql(
        &server.url(),
        "UPDATE idem_meta SET value = 7 WHERE name = 'schema_version'"
    ));
    idem.run(&["get", "t", "o", "k"]).code(1).one_error_line(&[
        "schema is version 7",
        "at most 4",
        "newer idem",
    ]);
    idem.run(&["begin", "t", "o", "k2"])
        .code(1)
        .one_error_line(&["schema is version 7"]);
}

#[test]
fn entities_move_on_a_database_as_on_a_file() {
    let server = Server::start();
    let idem = on(&server, "postgres");
    let machine = idem.file(
        "payment.json",
        br#"{"states":["created","paid","refunded"],"initial":"created","moves":[["created","paid"],["paid","refunded"]]}"#,
    );
    let step = |to: &str| {
        idem.run(&[
            "--json",
            "transition",
            "shop",
            "payment",
            "p-1",
            to,
            "--machine",
            &machine,
        ])
    };
    let created = step("created");
    created.code(0);
    assert_eq!(created.json()["decision"], "applied");
    let illegal = step("refunded");
    illegal.code(6);
    assert_eq!(illegal.json()["decision"], "illegal");
    let paid = step("paid");
    assert_eq!(
        (
            paid.json()["decision"].clone(),
            paid.json()["version"].clone()
        ),
        (json!("applied"), json!(2))
    );
    assert_eq!(step("paid").json()["decision"], "already_there");
    let got = idem.run(&["--json", "entity", "get", "shop", "payment", "p-1"]);
    got.code(0);
    assert_eq!(
        (got.json()["state"].clone(), got.json()["version"].clone()),
        (json!("paid"), json!(2))
    );
    let listed = idem.run(&["--json", "entity", "list", "payment", "--state", "paid"]);
    listed.code(0);
    assert_eq!(listed.json_lines().len(), 1);
    idem.run(&["entity", "get", "shop", "payment", "p-2"])
        .code(7);
}

#[test]
fn tokens_are_issued_and_consumed_once_on_a_database() {
    let server = Server::start();
    let idem = on(&server, "postgres");
    let issued = idem.run(&[
        "--json", "token", "issue", "shop", "redeem", "--ttl", "15m", "--intent", "order-1",
    ]);
    issued.code(0);
    let token = issued.json()["token"].as_str().unwrap().to_owned();
    let again = idem.run(&[
        "--json", "token", "issue", "shop", "redeem", "--ttl", "15m", "--intent", "order-1",
    ]);
    assert_eq!(
        again.json()["token"],
        token.as_str(),
        "one token per intent"
    );
    assert_eq!(again.json()["new"], false);

    let counter = idem.path("runs");
    let script = format!("echo run >> {}; echo redeemed", counter.display());
    for _ in 0..2 {
        let run = idem.run(&[
            "token", "consume", "shop", "redeem", &token, "--", "sh", "-c", &script,
        ]);
        run.code(0);
        assert_eq!(run.stdout, "redeemed\n");
    }
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap(),
        "run\n",
        "ran once"
    );
    let got = idem.run(&["--json", "token", "get", "shop", "redeem", &token]);
    got.code(0);
    assert_eq!(got.json()["used"], "succeeded");
    idem.run(&[
        "token",
        "consume",
        "shop",
        "redeem",
        "AAAAAAAAAAAAAAAAAAAAAA",
        "--",
        "true",
    ])
    .code(8);
    idem.run(&["--json", "token", "sweep"]).code(0);
}
