//! Crash-recovery test: `kill -9` a real `keel dev` process under load and check that every
//! acknowledged operation survived (work in progress).
