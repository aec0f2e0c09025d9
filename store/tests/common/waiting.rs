//! Duplicates that wait for a running request's outcome (docs/design.md §16), through the
//! tower layer on any engine: the same scenario for the file and for PostgreSQL.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use idem_store::Receiver;
use idem_store::http::{IdempotencyLayer, RequestBody, Settings, Tenant, WaitEnded, Waited};
use tower::{Layer, ServiceExt};

/// What the duplicates were answered.
pub struct Waits {
    /// How often the handler ran.
    pub executions: usize,
    /// The first request's answer: status and body.
    pub first: (u16, String),
    /// Each duplicate's status, body, `Idempotent-Replayed` header and how its wait
    /// ended.
    pub duplicates: Vec<(u16, String, Option<String>, Option<WaitEnded>)>,
}

/// Sends one request under `key` through a layer on `runner` to a handler that takes
/// `runs`, and once it runs, `duplicates` more of the same request at once through a
/// layer on `waiter` (the same layer when both are the same store), each allowed to
/// wait `wait`.
pub async fn duplicates_of_a_running_key<R: Receiver + 'static>(
    runner: &Arc<R>,
    waiter: &Arc<R>,
    key: &str,
    runs: Duration,
    duplicates: usize,
    wait: Duration,
) -> Waits {
    let executions = Arc::new(AtomicUsize::new(0));
    let handler = tower::service_fn({
        let executions = Arc::clone(&executions);
        move |_: Request<RequestBody<Full<Bytes>>>| {
            let n = executions.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                tokio::time::sleep(runs).await;
                let response = Response::builder()
                    .status(201)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(format!("{{\"order\":{n}}}"))))
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        }
    });
    let settings = Settings {
        tenant: Tenant::Fixed("shop".into()),
        wait_in_flight: Some(wait),
        ..Settings::default()
    };
    let service =
        IdempotencyLayer::new(Arc::clone(runner), settings.clone()).layer(handler.clone());
    let other = if Arc::ptr_eq(runner, waiter) {
        service.clone()
    } else {
        IdempotencyLayer::new(Arc::clone(waiter), settings).layer(handler)
    };
    let request = || {
        Request::post("/orders")
            .header("content-type", "application/json")
            .header("idempotency-key", format!("\"{key}\""))
            .body(Full::new(Bytes::from_static(b"{\"amount\":5}")))
            .unwrap()
    };
    let first = tokio::spawn(service.clone().oneshot(request()));
    while executions.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiting: Vec<_> = (0..duplicates)
        .map(|_| tokio::spawn(other.clone().oneshot(request())))
        .collect();
    let first = first.await.unwrap().unwrap();
    let first = (
        first.status().as_u16(),
        String::from_utf8(
            first
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap(),
    );
    let mut answers = Vec::new();
    for duplicate in waiting {
        let (parts, body) = duplicate.await.unwrap().unwrap().into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        answers.push((
            parts.status.as_u16(),
            String::from_utf8(body.to_vec()).unwrap(),
            parts
                .headers
                .get("idempotent-replayed")
                .map(|v| v.to_str().unwrap().to_owned()),
            parts.extensions.get::<Waited>().map(|w| w.ended),
        ));
    }
    Waits {
        executions: executions.load(Ordering::SeqCst),
        first,
        duplicates: answers,
    }
}

/// Every duplicate waited and got the first request's answer, replayed; it ran once.
pub fn assert_all_replayed(waits: &Waits) {
    assert_eq!(waits.executions, 1, "it ran once");
    assert_eq!(waits.first.0, 201, "{}", waits.first.1);
    for (status, body, replayed, ended) in &waits.duplicates {
        assert_eq!(
            (*status, body, replayed.as_deref(), *ended),
            (201, &waits.first.1, Some("true"), Some(WaitEnded::Settled)),
        );
    }
}

/// Every duplicate waited the whole wait and got 409 with `Retry-After`.
pub fn assert_all_timed_out(waits: &Waits) {
    assert_eq!(waits.executions, 1, "it ran once");
    for (status, body, _, ended) in &waits.duplicates {
        assert_eq!(
            (*status, *ended),
            (409, Some(WaitEnded::TimedOut)),
            "{body}"
        );
    }
}
