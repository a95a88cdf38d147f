//! `keel client --jsonl` against a real kernel: the binary's `keel dev` on a free port and a
//! fresh SQLite directory, and the bridge as a child process driven over its stdin/stdout.
//! Checks the answer lines of every op, errors for bad lines and failed calls (the bridge
//! keeps going), a watch that streams while later commands are served, and that the end of
//! stdin lets a running watch finish before the process exits 0.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long any expected line may take.
const WAIT: Duration = Duration::from_secs(15);

/// `keel dev` on a free port; killed when dropped.
struct Kernel {
    _child: Child,
    url: String,
    _data: tempfile::TempDir,
}

impl Kernel {
    async fn start() -> Kernel {
        let data = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args([
                "dev",
                "--port",
                "0",
                "--log-level",
                "info",
                "--log-format",
                "text",
            ])
            .arg("--data-dir")
            .arg(data.path())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn keel dev");
        let mut log = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let address = tokio::time::timeout(WAIT, async {
            while let Ok(Some(line)) = log.next_line().await {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    return rest.split_whitespace().next().map(str::to_owned);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .expect("keel dev reports its address");
        // Keep draining the log so the kernel never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
        Kernel {
            _child: child,
            url: format!("http://{address}"),
            _data: data,
        }
    }
}

/// The bridge process and the lines it printed that no check has taken yet.
struct Bridge {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    unclaimed: Vec<Value>,
}

impl Bridge {
    fn start(url: &str) -> Bridge {
        let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(["client", "--jsonl", "--url", url])
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn keel client --jsonl");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Bridge {
            child,
            stdin,
            stdout,
            unclaimed: Vec::new(),
        }
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.write_all(b"\n").await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// Returns the first line (already printed or still to come) that `wanted` accepts.
    async fn expect(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(index) = self.unclaimed.iter().position(&wanted) {
            return self.unclaimed.remove(index);
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let line = tokio::time::timeout_at(deadline, self.stdout.next_line())
                .await
                .unwrap_or_else(|_| panic!("no line for {what}; unclaimed: {:?}", self.unclaimed))
                .expect("read stdout")
                .unwrap_or_else(|| {
                    panic!(
                        "stdout ended before {what}; unclaimed: {:?}",
                        self.unclaimed
                    )
                });
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|error| panic!("bridge printed a non-JSON line {line:?}: {error}"));
            if wanted(&value) {
                return value;
            }
            self.unclaimed.push(value);
        }
    }

    /// The answer line of the command sent with `reference`.
    async fn answer(&mut self, reference: &str) -> Value {
        self.expect(reference, |line| {
            line["ref"] == reference && line.get("event").is_none()
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonl_bridge_drives_a_kernel_over_stdio() {
    let kernel = Kernel::start().await;
    let http = reqwest::Client::new();
    let mut bridge = Bridge::start(&kernel.url);

    // Bad lines get error lines and the bridge carries on.
    bridge.send("this is not json").await;
    let bad = bridge
        .expect("INVALID_JSON", |line| line["ok"] == false)
        .await;
    assert_eq!(bad["error"]["code"], "INVALID_JSON");
    assert!(bad.get("ref").is_none());
    bridge.send(r#"{"op":"launch","ref":"u1"}"#).await;
    let unknown = bridge.answer("u1").await;
    assert_eq!(unknown["op"], "launch");
    assert_eq!(unknown["error"]["code"], "UNKNOWN_OP");
    bridge.send(r#"{"op":"cancel","ref":{"n":2}}"#).await;
    let missing = bridge
        .expect("missing id", |line| line["ref"] == json!({"n": 2}))
        .await;
    assert_eq!(missing["error"]["code"], "INVALID_COMMAND");

    // create → an execution, pending (no agent is connected).
    bridge
        .send(r#"{"op":"create","ref":"c1","agent_id":"jsonl-agent","input":{"n":1},"labels":{"team":"a"}}"#)
        .await;
    let created = bridge.answer("c1").await;
    assert_eq!(created["ok"], true, "{created}");
    assert_eq!(created["op"], "create");
    assert_eq!(created["execution"]["status"], "pending");
    assert_eq!(created["execution"]["labels"], json!({"team": "a"}));
    let id = created["execution"]["id"].as_str().expect("id").to_owned();

    // watch streams while later commands are answered.
    bridge
        .send(&format!(r#"{{"op":"watch","ref":"w1","id":"{id}"}}"#))
        .await;
    let first = bridge
        .expect("first event", |line| line["ref"] == "w1")
        .await;
    assert_eq!(first["id"], id.as_str());
    assert_eq!(first["event"]["type"], "execution.created");
    assert_eq!(first["event"]["sequence"], 1);
    bridge
        .send(&format!(
            r#"{{"op":"signal","ref":"s1","id":"{id}","signal_type":"go","payload":{{"k":1}}}}"#
        ))
        .await;
    let signalled = bridge.answer("s1").await;
    assert_eq!(signalled["ok"], true, "{signalled}");
    bridge
        .send(&format!(r#"{{"op":"get","ref":"g1","id":"{id}"}}"#))
        .await;
    let got = bridge.answer("g1").await;
    assert_eq!(got["execution"]["id"], id.as_str());
    bridge
        .send(&format!(r#"{{"op":"cancel","ref":"x1","id":"{id}"}}"#))
        .await;
    let cancelled = bridge.answer("x1").await;
    assert_eq!(cancelled["ok"], true, "{cancelled}");

    let terminal = bridge
        .expect("execution.cancelled event", |line| {
            line["ref"] == "w1" && line["event"]["type"] == "execution.cancelled"
        })
        .await;
    let done = bridge.answer("w1").await;
    assert_eq!(
        done,
        json!({"ref": "w1", "op": "watch", "ok": true, "id": id, "done": true, "status": "cancelled"})
    );
    // Every event of the log came through, in order, before the done line.
    let events: Value = http
        .get(format!("{}/v0/executions/{id}/events", kernel.url))
        .send()
        .await
        .expect("events")
        .json()
        .await
        .expect("JSON");
    let last = events["events"]
        .as_array()
        .expect("events")
        .last()
        .cloned()
        .expect("some");
    assert_eq!(terminal["event"]["sequence"], last["sequence"]);

    // Kernel errors come back with their code and status.
    bridge
        .send(r#"{"op":"cancel","ref":"x2","id":"no-such-execution"}"#)
        .await;
    let not_found = bridge.answer("x2").await;
    assert_eq!(not_found["ok"], false);
    assert_eq!(not_found["error"]["code"], "NOT_FOUND");
    assert_eq!(not_found["error"]["status"], 404);
    bridge
        .send(r#"{"op":"create","ref":"c2","agent_id":"jsonl-agent","labels":{"n":1}}"#)
        .await;
    let refused = bridge.answer("c2").await;
    assert_eq!(refused["error"]["status"], 400, "{refused}");

    // At the end of stdin the running watch still finishes, then the bridge exits 0.
    bridge
        .send(r#"{"op":"create","ref":"c3","agent_id":"jsonl-agent"}"#)
        .await;
    let second = bridge.answer("c3").await["execution"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    bridge
        .send(&format!(r#"{{"op":"watch","ref":"w2","id":"{second}"}}"#))
        .await;
    bridge
        .expect("w2 first event", |line| line["ref"] == "w2")
        .await;
    drop(bridge.stdin.take());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        bridge.child.try_wait().expect("status").is_none(),
        "exited before the watch ended"
    );
    let response = http
        .post(format!("{}/v0/executions/{second}/cancel", kernel.url))
        .json(&json!({}))
        .send()
        .await
        .expect("cancel");
    assert!(response.status().is_success());
    let done = bridge.answer("w2").await;
    assert_eq!(done["status"], "cancelled");
    let status = tokio::time::timeout(WAIT, bridge.child.wait())
        .await
        .expect("the bridge exits after stdin ended and the watch finished")
        .expect("status");
    assert!(status.success(), "{status}");
}
