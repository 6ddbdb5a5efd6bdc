//! GOAWAY: the server is shutting down; it lists the request ids it will still answer on this
//! connection. Anything else the client sent and has no answer for was not read and never will be.

use crate::frame::FrameError;

/// Upper bound on ids in one GOAWAY; servers bound in-flight requests per connection below it.
pub const MAX_GOAWAY_IDS: usize = 8192;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GoAway {
    pub pending: Vec<u64>,
}

impl GoAway {
    /// Layout: count u32 LE, then `count` request ids u64 LE.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(
            self.pending.len() <= MAX_GOAWAY_IDS,
            "GOAWAY id list over its bound"
        );
        out.extend_from_slice(&(self.pending.len() as u32).to_le_bytes());
        for id in &self.pending {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }

    pub fn decode(b: &[u8]) -> Result<GoAway, FrameError> {
        if b.len() < 4 {
            return Err(FrameError::Short {
                needed: 4,
                have: b.len(),
            });
        }
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if n > MAX_GOAWAY_IDS {
            return Err(FrameError::TooLarge(n, MAX_GOAWAY_IDS));
        }
        if b.len() != 4 + 8 * n {
            return Err(FrameError::LengthMismatch {
                declared: 8 * n,
                have: b.len() - 4,
            });
        }
        let pending = b[4..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunks_exact(8)")))
            .collect();
        Ok(GoAway { pending })
    }
}
