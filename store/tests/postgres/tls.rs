//! TLS to the database (feature `postgres-tls`): a server whose certificate a private CA
//! signed, trusted through `tls_root_certificates`; refused without that root.

use std::path::{Path, PathBuf};
use std::process::Command;

use idem_core::protocol::Decision;
use idem_core::{Config, Timestamp};
use idem_store::Receiver;
use idem_store::postgres::PgStore;

use super::{Server, client, fp, id};

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (Debian's openssl package)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, and a certificate for 127.0.0.1 it signed, in a directory the server's user can
/// read: `(directory, ca.crt's PEM)`.
fn certificates() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path();
    openssl(
        at,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=idem test CA",
        ],
    );
    openssl(
        at,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(at.join("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        at,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
        ],
    );
    // The server reads its key as its own user, and refuses a key others may read.
    let chmod = Command::new("chmod")
        .arg("600")
        .arg(at.join("server.key"))
        .status()
        .unwrap();
    assert!(chmod.success());
    if String::from_utf8_lossy(&Command::new("id").arg("-u").output().unwrap().stdout).trim() == "0"
    {
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(at)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    let ca = std::fs::read(at.join("ca.crt")).unwrap();
    (dir, ca)
}

fn path(dir: &Path, name: &str) -> String {
    PathBuf::from(dir).join(name).to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_signed_by_a_private_ca_is_trusted_with_its_root_and_refused_without() {
    let (dir, ca) = certificates();
    let cert = path(dir.path(), "server.crt");
    let key = path(dir.path(), "server.key");
    let server = Server::start_with(&[
        ("ssl", "on"),
        ("ssl_cert_file", &cert),
        ("ssl_key_file", &key),
    ]);
    let url = format!("{}?sslmode=require&application_name=idem_tls", server.url());

    let store = PgStore::builder()
        .config(Config::default())
        .tls_root_certificates(&ca)
        .connect(&url)
        .await
        .unwrap();
    assert!(matches!(
        store
            .begin(&id("tls-1"), fp("a"), Timestamp(0))
            .await
            .unwrap(),
        Decision::Claimed { .. }
    ));
    let db = client(&server).await;
    let encrypted: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
              WHERE ssl AND application_name = 'idem_tls'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted >= 1, "the engine's sessions use TLS");

    // Without the CA's root the certificate is not trusted: refused, naming why.
    let refused = PgStore::connect(&url).await.unwrap_err();
    let mut chain = refused.to_string();
    let mut cause = std::error::Error::source(&refused);
    while let Some(e) = cause {
        chain.push_str(": ");
        chain.push_str(&e.to_string());
        cause = e.source();
    }
    assert!(chain.contains("UnknownIssuer"), "{chain}");

    let garbage = PgStore::builder()
        .tls_root_certificates(b"not a certificate")
        .connect(&url)
        .await
        .unwrap_err();
    assert!(
        garbage
            .to_string()
            .starts_with("TLS root certificates: no PEM certificate"),
        "{garbage}"
    );
}
