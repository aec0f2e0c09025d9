//! TLS to MariaDB (feature `mysql-tls`): a server with a certificate of a private CA and
//! `require_secure_transport`; the URL's `require_ssl=true` with the CA given connects,
//! without the CA the certificate is refused, without TLS the server refuses.

use idem_store::mysql::{ConnectError, MySqlStore};

use crate::certificates::certificates;
use crate::server::Server;
use crate::tables;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_a_private_ca_is_trusted_only_with_that_ca() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    certificates(dir.path());
    let file = |name: &str| dir.path().join(name).display().to_string();
    let server = Server::start_with(&[
        ("ssl-ca", &file("ca.pem")),
        ("ssl-cert", &file("server.pem")),
        ("ssl-key", &file("server.key")),
        ("require-secure-transport", "ON"),
    ]);
    server.sql("CREATE DATABASE shop");
    let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
    let tls = format!("{}?require_ssl=true", server.url_of("shop"));

    // Without the CA, the server's certificate is refused and nothing is written.
    let error = MySqlStore::connect(&tls).await.unwrap_err();
    assert!(
        matches!(error, ConnectError::Connect(_)) && format!("{error:?}").contains("UnknownIssuer"),
        "{error:?}"
    );
    assert_eq!(tables(&server, "shop"), "");
    // Without TLS, the server refuses.
    let error = MySqlStore::connect(&server.url_of("shop"))
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Connect(_)), "{error:?}");
    assert_eq!(tables(&server, "shop"), "");

    let store = MySqlStore::builder()
        .tls_root_certificates(&ca)
        .connect(&tls)
        .await
        .unwrap();
    assert!(store.ping().await);
    assert!(tables(&server, "shop").contains("idem_records"));
}
