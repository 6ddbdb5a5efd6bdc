//! mqueue: a single-producer single-consumer ring of fixed-size slots (Lynx's message queue),
//! and the message that crosses every engine boundary.
//!
//! One memory layout, fixed in `include/cohort_mqueue.h`, is shared by the host and CUDA
//! sides. A slot holds one message: {token, service, status, request id, deadline} + payload.
//! The ring lives in a [`RingMemory`]: plain host memory here; mapped pinned host memory and
//! device memory implement the same trait in the gpu crate, so the same producer/consumer code
//! drives host <-> GPU rings.
//!
//! Protocol (see the header): the producer fills a slot and release-stores its `seq` doorbell
//! last; the consumer acquire-loads `seq`. The consumer publishes its tail every
//! `publish_every` messages, not per message, because on PCIe every published word is a bus
//! transaction.

mod layout;
mod memory;
mod ring;

pub use layout::{Layout, SlotHeader, CONTROL_BYTES, SLOT_ALIGN, SLOT_HEADER_BYTES, SPILLED};
pub use memory::{HostMemory, RingMemory};
pub use ring::{channel, channel_in, Consumer, Envelope, Message, Producer, SendError};
