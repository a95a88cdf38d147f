//! One HTTP/1.1 keep-alive connection owned by one closed loop of `keel bench run
//! --local-steps` (hyper's connection API): no pool to check out from, no URL to parse per
//! request, so the load generator spends little CPU per call. A connection that fails is
//! dropped and the next call opens a new one.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::net::TcpStream;

use super::http::{
    CreateBody, Created, INTENT_PATH, Intent, IntentAnswer, IntentBody, STEP_RESULT_PATH, StepData,
    StepResultBody,
};

/// Time allowed for one call, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(35);

/// A connection to the kernel (opened on first use).
pub struct Conn {
    address: String,
    host: HeaderValue,
    auth: Option<HeaderValue>,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// A connection to `base_url` (`http://host:port`), with an optional `Authorization` value.
    pub fn new(base_url: &str, auth: Option<HeaderValue>) -> Result<Self, String> {
        let address = base_url
            .strip_prefix("http://")
            .map(|rest| rest.trim_end_matches('/'))
            .filter(|address| !address.is_empty() && !address.contains('/'))
            .ok_or_else(|| format!("{base_url:?} is not http://host:port"))?;
        let address = if address.contains(':') {
            address.to_owned()
        } else {
            format!("{address}:80")
        };
        let host = HeaderValue::from_str(&address).map_err(|error| error.to_string())?;
        Ok(Self {
            address,
            host,
            auth,
            sender: None,
        })
    }

    /// POSTs `body` as JSON to `path` and decodes the answer into `R`.
    pub async fn post<B: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        path: &str,
        body: &B,
    ) -> Result<R, String> {
        let bytes = serde_json::to_vec(body).map_err(|error| error.to_string())?;
        let answer = self.call(Method::POST, path, bytes).await?;
        serde_json::from_slice(&answer).map_err(|error| format!("POST {path}: bad answer: {error}"))
    }

    /// GETs `path` and returns the body of a 2xx answer.
    pub async fn get(&mut self, path: &str) -> Result<Bytes, String> {
        self.call(Method::GET, path, Vec::new()).await
    }

    /// Sends one request within `REQUEST_TIMEOUT`; errors name the method and path, and a
    /// request left unanswered drops the connection.
    async fn call(&mut self, method: Method, path: &str, body: Vec<u8>) -> Result<Bytes, String> {
        let name = method.clone();
        match tokio::time::timeout(REQUEST_TIMEOUT, self.send(method, path, body)).await {
            Ok(answer) => answer.map_err(|error| format!("{name} {path}: {error}")),
            Err(_) => {
                self.sender = None;
                Err(format!(
                    "{name} {path}: no answer within {REQUEST_TIMEOUT:?}"
                ))
            }
        }
    }

    /// Sends one request (a JSON body unless it is empty) and returns the body of a 2xx answer.
    async fn send(&mut self, method: Method, path: &str, body: Vec<u8>) -> Result<Bytes, String> {
        // Every state-changing request says JSON, body or not (the kernel refuses the others).
        let json = !body.is_empty() || method != Method::GET;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.host.clone());
        if json {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| error.to_string())?;
        let sender = self.ready_sender().await?;
        let outcome = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|error| error.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| error.to_string())?
                .to_bytes();
            Ok::<_, String>((status, body))
        }
        .await;
        let (status, body) = outcome.inspect_err(|_| self.sender = None)?;
        if !status.is_success() {
            return Err(format!(
                "{} {}",
                status.as_u16(),
                String::from_utf8_lossy(&body)
            ));
        }
        Ok(body)
    }

    /// Returns a sender ready for a request, connecting first when there is none usable.
    async fn ready_sender(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, String> {
        let usable = match self.sender.as_mut() {
            Some(sender) => sender.ready().await.is_ok(),
            None => false,
        };
        if !usable {
            let stream = TcpStream::connect(&self.address)
                .await
                .map_err(|error| format!("cannot connect to {}: {error}", self.address))?;
            stream
                .set_nodelay(true)
                .map_err(|error| error.to_string())?;
            let (sender, connection) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|error| error.to_string())?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            self.sender = Some(sender);
        }
        self.sender
            .as_mut()
            .ok_or_else(|| "no connection".to_owned())
    }

    /// Creates an execution of `agent_id` and returns its id.
    pub async fn create(&mut self, agent_id: &str, index: u64) -> Result<String, String> {
        let created: Created = self
            .post("/v0/executions", &CreateBody::new(agent_id, index))
            .await?;
        Ok(created.id)
    }

    /// Sends an intent and fails unless it was accepted; returns the step id, if any.
    pub async fn intent(
        &mut self,
        execution_id: &str,
        session_id: &str,
        intent: Intent<'_>,
    ) -> Result<Option<String>, String> {
        let body = IntentBody {
            execution_id,
            session_id,
            intent,
        };
        let answer: IntentAnswer = self.post(INTENT_PATH, &body).await?;
        answer.step()
    }

    /// Reports a local step as succeeded.
    pub async fn step_result(
        &mut self,
        execution_id: &str,
        session_id: &str,
        step_id: &str,
        index: u32,
    ) -> Result<(), String> {
        let body = StepResultBody {
            execution_id,
            session_id,
            step_id,
            success: true,
            data: StepData { index },
        };
        let _: Value = self.post(STEP_RESULT_PATH, &body).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_comes_from_the_base_url() {
        let conn = Conn::new("http://127.0.0.1:8080/", None).ok();
        assert_eq!(
            conn.map(|conn| conn.address),
            Some("127.0.0.1:8080".to_owned())
        );
        let conn = Conn::new("http://localhost", None).ok();
        assert_eq!(
            conn.map(|conn| conn.address),
            Some("localhost:80".to_owned())
        );
        assert!(Conn::new("https://127.0.0.1:8080", None).is_err());
        assert!(Conn::new("http://127.0.0.1:8080/prefix", None).is_err());
    }
}
