//! A blocking HTTP transport for the outbox's [`Sender`](super::sender::Sender)
//! (feature `sender-http`, on ureq with rustls): each attempt is a POST of its payload,
//! its key in the `Idempotency-Key` header.

use std::fmt;
use std::time::Duration;

use idem_core::{Attempt, Reply, Timestamp};

use super::sender::{NoReply, Transport, key_header, retry_after};

/// Where an attempt goes: one URL for every operation, or one chosen per attempt.
type Route = Box<dyn Fn(&Attempt) -> String + Send + Sync>;

/// POSTs each attempt over HTTP or HTTPS (the web's root certificates). Every reply is
/// brought back whatever its status; a failed connection, a reset or the timeout is
/// [`NoReply`].
pub struct HttpTransport {
    agent: ureq::Agent,
    route: Route,
    headers: Vec<(String, String)>,
    timeout: Duration,
    body_limit: u64,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("body_limit", &self.body_limit)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// Every attempt to `url` (`https://head-office.example/sales`), with a timeout of
    /// 30 s for the whole exchange and the first 1 MiB of a reply's body kept. Redirects
    /// are not followed: a 3xx is the reply.
    #[must_use]
    pub fn new(url: impl Into<String>) -> HttpTransport {
        let url = url.into();
        HttpTransport::routed(move |_| url.clone())
    }

    /// Each attempt to the URL `route` gives it (by its operation, say).
    #[must_use]
    pub fn routed(route: impl Fn(&Attempt) -> String + Send + Sync + 'static) -> HttpTransport {
        let timeout = Duration::from_secs(30);
        HttpTransport {
            agent: agent(timeout),
            route: Box::new(route),
            headers: Vec::new(),
            timeout,
            body_limit: 1 << 20,
        }
    }

    /// A header sent with every attempt (`Content-Type`, an API key).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> HttpTransport {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How long one exchange may take, connection to the reply's last byte; past it the
    /// attempt has no reply.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> HttpTransport {
        self.timeout = timeout;
        self.agent = agent(timeout);
        self
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        // A redirect would turn the POST into a GET whose answer is not the
        // receiver's to the attempt: a 3xx is a reply like any other.
        .max_redirects(0)
        .build()
        .into()
}

impl Transport for HttpTransport {
    fn send(&mut self, attempt: &Attempt, now: Timestamp) -> Result<Reply, NoReply> {
        let url = (self.route)(attempt);
        let mut request = self
            .agent
            .post(&url)
            .header("Idempotency-Key", &key_header(&attempt.key));
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let mut response = request
            .send(&attempt.payload[..])
            .map_err(|e| NoReply(format!("{url}: {e}")))?;
        let status = response.status().as_u16();
        let retry_at = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| retry_after(value, now));
        // The first `body_limit` bytes are kept: a long definitive reply is still one.
        let mut body = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(response.body_mut().as_reader(), self.body_limit),
            &mut body,
        )
        .map_err(|e| NoReply(format!("{url}: the reply's body: {e}")))?;
        Ok(Reply {
            status,
            body,
            retry_at,
        })
    }
}
