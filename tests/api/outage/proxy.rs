//! A TCP proxy on 127.0.0.1 in front of PostgreSQL that can be closed (every forwarded
//! connection reset, the port refusing) and reopened on the same port.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The proxy; dropping it closes it.
pub struct Proxy {
    /// The local address it listens on (kept across close and reopen).
    pub address: SocketAddr,
    upstream: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding from a free local port to `upstream`.
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = listen("127.0.0.1:0".parse().expect("address"));
        let address = listener.local_addr().expect("local address");
        Self {
            address,
            upstream,
            accept: Some(serve(listener, upstream)),
        }
    }

    /// Stops listening and resets every forwarded connection.
    pub async fn close(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
            let _ = accept.await;
        }
    }

    /// Listens on the same port again.
    pub fn reopen(&mut self) {
        let listener = listen(self.address);
        self.accept = Some(serve(listener, self.upstream));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
        }
    }
}

/// Binds a listener that may take over a port whose old connections are in TIME_WAIT.
fn listen(address: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("reuseaddr");
    socket.bind(address).expect("bind");
    socket.listen(64).expect("listen")
}

/// Accepts connections and pipes each to `upstream`. Aborting the task drops the set of pipes,
/// which aborts them all and closes their sockets.
fn serve(listener: TcpListener, upstream: SocketAddr) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut pipes = JoinSet::new();
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                continue;
            };
            while pipes.try_join_next().is_some() {}
            pipes.spawn(async move {
                if let Ok(mut server) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    })
}
