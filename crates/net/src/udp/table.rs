//! The client table of one io thread: token -> who asked. Fixed capacity, allocated once; a
//! full table means the io thread has as many requests in flight as it may, and new ones are
//! refused with OVERLOADED.

#[derive(Clone, Copy)]
pub struct Client {
    pub addr: libc::sockaddr_storage,
    pub addr_len: libc::socklen_t,
}

pub struct ClientTable {
    entries: Vec<Option<Client>>,
    free: Vec<u32>,
}

impl ClientTable {
    pub fn new(capacity: usize) -> ClientTable {
        assert!(capacity > 0 && capacity <= u32::MAX as usize);
        ClientTable {
            entries: vec![None; capacity],
            free: (0..capacity as u32).rev().collect(),
        }
    }

    pub fn insert(&mut self, c: Client) -> Option<u32> {
        let t = self.free.pop()?;
        debug_assert!(self.entries[t as usize].is_none());
        self.entries[t as usize] = Some(c);
        Some(t)
    }

    /// Frees the token. Panics on a token that is not in use: that would be a second answer.
    pub fn remove(&mut self, token: u32) -> Client {
        let c = self.entries[token as usize]
            .take()
            .expect("answer for a token not in flight");
        self.free.push(token);
        c
    }

    pub fn in_flight(&self) -> usize {
        self.entries.len() - self.free.len()
    }
}
