//! An axum service with idempotency keys: `POST /orders/{shop}` runs once per key.
//!
//! ```text
//! cargo run -p idem-store --features http --example axum -- serve 127.0.0.1:3000
//! curl -i -X POST localhost:3000/orders/7 -H 'X-Tenant: acme' \
//!      -H 'Idempotency-Key: "order-1"' -H 'Content-Type: application/json' -d '{"item":"tea"}'
//! ```
//!
//! Sent twice, the second answer is the first one's, with `Idempotent-Replayed: true`;
//! the same key with another body is a 422. Without `serve`, the example sends those
//! requests itself, in process, and prints the answers.
//!
//! The layer goes on the routes with `route_layer`, so the operation is the matched
//! route (`POST /orders/{shop}`): every shop's orders share one operation. The tenant is
//! the `X-Tenant` header here; in a real service it comes from your authentication.
//!
//! The store is opened by what it is given (`AnyStore`): a path opens a file, a URL a
//! database. The same service as a fleet: every replica on one PostgreSQL database, so a
//! retry may reach any of them (feature `postgres`):
//!
//! ```text
//! cargo run -p idem-store --features http,postgres --example axum -- \
//!     serve 127.0.0.1:3000 postgres://idem@db.internal/shop
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Path};
use axum::http::{Request, StatusCode, request::Parts};
use axum::routing::post;
use idem_store::Receiver;
use idem_store::any::AnyStore;
use idem_store::http::{IdempotencyLayer, RequestBody, Settings};
use tower::{ServiceBuilder, ServiceExt};

/// The router: `POST /orders/{shop}` behind the idempotency layer, on any receiver.
fn app<R: Receiver>(store: Arc<R>) -> Router {
    let orders = Arc::new(AtomicU64::new(0));
    let settings = Settings {
        operation: Arc::new(|parts: &Parts| {
            let route = parts.extensions.get::<MatchedPath>();
            format!(
                "{} {}",
                parts.method,
                route.map_or(parts.uri.path(), MatchedPath::as_str)
            )
        }),
        ..Settings::default()
    };
    let create = move |Path(shop): Path<u32>, body: String| {
        let number = orders.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            let order = format!("{{\"shop\":{shop},\"order\":{number},\"request\":{body}}}");
            (
                StatusCode::CREATED,
                [
                    ("content-type", "application/json"),
                    ("location", "/orders"),
                ],
                order,
            )
        }
    };
    Router::new()
        .route("/orders/{shop}", post(create))
        .route_layer(
            ServiceBuilder::new()
                .layer(IdempotencyLayer::new(store, settings))
                // The layer hands on the body it buffered; axum's routes take its `Body`.
                .map_request(|request: Request<RequestBody<Body>>| request.map(Body::new)),
        )
}

/// Sends a request, a retry and a reused key in process; returns the statuses.
async fn demo<R: Receiver>(store: Arc<R>) -> Result<Vec<u16>, Box<dyn std::error::Error>> {
    let app = app(store);
    let mut statuses = Vec::new();
    for body in [
        r#"{"item":"tea"}"#,
        r#"{"item":"tea"}"#,
        r#"{"item":"coffee"}"#,
    ] {
        let request = Request::post("/orders/7")
            .header("x-tenant", "acme")
            .header("idempotency-key", "\"order-1\"")
            .header("content-type", "application/json")
            .body(Body::from(body))?;
        let response = app.clone().oneshot(request).await?;
        let status = response.status().as_u16();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await?;
        println!(
            "{status} replayed={replayed} {}",
            String::from_utf8_lossy(&bytes)
        );
        statuses.push(status);
    }
    Ok(statuses)
}

/// The in-process demo on a fresh store file; what the example test runs.
pub fn run() -> Result<Vec<u16>, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    tokio::runtime::Runtime::new()?.block_on(async {
        let store = AnyStore::open(dir.path().join("orders.redb")).await?;
        demo(Arc::new(store)).await
    })
}

/// The in-process demo on the PostgreSQL database at `url`.
#[cfg(feature = "postgres")]
pub async fn run_on_postgres(url: &str) -> Result<Vec<u16>, Box<dyn std::error::Error>> {
    demo(Arc::new(AnyStore::open(url).await?)).await
}

async fn serve<R: Receiver>(
    address: &str,
    store: Arc<R>,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app(store)).await?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("serve") {
        run()?;
        return Ok(());
    }
    let address = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    let target = args.next().unwrap_or_else(|| "orders.redb".into());
    tokio::runtime::Runtime::new()?.block_on(async {
        let store = AnyStore::open(&target).await?;
        serve(&address, Arc::new(store)).await
    })
}
