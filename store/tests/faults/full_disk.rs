//! A full disk under the HTTP layer (docs/design.md §10): the handler ran and answered,
//! and the store could not settle its key. The client gets the handler's answer; the
//! layer keeps the outcome and stores it once the disk has room again, with nothing
//! restarted; meanwhile a retry of the key is answered in progress, never run again and
//! never told the outcome is unknown, and a duplicate that waits gets the replay.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use idem_store::http::{IdempotencyLayer, RequestBody, Settings, Tenant};
use idem_store::redb::ConcurrencyMode;
use idem_store::{RecordId, State};
use tower::{Layer, ServiceExt};

use crate::common::disk::SimDisk;
use crate::common::workload;

fn request(key: &str) -> Request<Full<Bytes>> {
    Request::post("/orders")
        .header("idempotency-key", format!("\"{key}\""))
        .body(Full::new(Bytes::from_static(b"{\"item\":\"tea\"}")))
        .unwrap()
}

async fn answer<B: http_body::Body<Data = Bytes>>(response: Response<B>) -> (u16, String)
where
    B::Error: std::fmt::Debug,
{
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_full_disk_refused_is_stored_once_there_is_room() {
    for mode in [
        ConcurrencyMode::MultiWriter,
        ConcurrencyMode::ExclusiveWriter,
    ] {
        let disk = SimDisk::default();
        let store = Arc::new(workload::open(disk.clone(), mode).unwrap());
        let executions = Arc::new(AtomicUsize::new(0));
        let handler = tower::service_fn({
            let (executions, disk) = (Arc::clone(&executions), disk.clone());
            move |_: Request<RequestBody<Full<Bytes>>>| {
                let n = executions.fetch_add(1, Ordering::SeqCst) + 1;
                // The disk fills while the order is being made.
                disk.fill();
                async move {
                    Ok::<_, Infallible>(
                        Response::builder()
                            .status(201)
                            .body(Full::new(Bytes::from(format!("{{\"order\":{n}}}"))))
                            .unwrap(),
                    )
                }
            }
        });
        let layer = IdempotencyLayer::new(
            Arc::clone(&store),
            Settings {
                tenant: Tenant::Fixed("shop".into()),
                ..Settings::default()
            },
        );
        let service = layer.clone().layer(handler);
        let first = answer(service.clone().oneshot(request("k-1")).await.unwrap()).await;
        assert_eq!(first.0, 201, "{mode:?}: the handler's answer: {}", first.1);
        let id = RecordId::new("shop", "POST /orders", "k-1").unwrap();
        assert_eq!(layer.unsettled().keys, 1, "{mode:?}: the outcome is kept");

        // While the disk is full, a retry is in progress: not run, not unknown.
        for _ in 0..3 {
            let retry = answer(service.clone().oneshot(request("k-1")).await.unwrap()).await;
            assert_eq!(retry.0, 409, "{mode:?}: a retry while full: {}", retry.1);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A fresh key cannot be claimed on a full disk: 503, nothing run.
        let fresh = answer(service.clone().oneshot(request("k-2")).await.unwrap()).await;
        assert_eq!(fresh.0, 503, "{mode:?}: {}", fresh.1);
        assert_eq!(executions.load(Ordering::SeqCst), 1, "{mode:?}: ran once");

        // Room again: the layer stores the outcome by itself, within its backoff.
        disk.free();
        let mut waited = 0;
        while layer.unsettled().keys > 0 {
            waited += 1;
            assert!(waited < 300, "{mode:?}: the outcome was never stored");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let record = store.get(&id).unwrap().unwrap();
        assert_eq!(record.state(), State::Succeeded, "{mode:?}");
        let replay = service.clone().oneshot(request("k-1")).await.unwrap();
        assert_eq!(
            replay
                .headers()
                .get("idempotent-replayed")
                .map(|v| v.to_str().unwrap()),
            Some("true")
        );
        assert_eq!(
            answer(replay).await,
            first,
            "{mode:?}: the replay is the answer"
        );
        assert_eq!(executions.load(Ordering::SeqCst), 1, "{mode:?}: ran once");
        assert!(store.check().unwrap().is_ok());
    }
}
