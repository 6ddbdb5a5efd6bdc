//! The service's codec: prost's, except that a message that does not decode is
//! INVALID_ARGUMENT (`BAD_REQUEST: ...`), not the INTERNAL tonic's prost codec answers.
//! A client's malformed or lying bytes are its error, and Cohort's statuses say so
//! (docs/protocol.md); the gRPC status-code guide's INTERNAL is for the server's own faults.
//! (A client decoding a broken answer sees the same code.)

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

#[derive(Debug, Clone)]
pub struct RequestCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for RequestCodec<T, U> {
    fn default() -> Self {
        RequestCodec(ProstCodec::default())
    }
}

/// prost's decoder, its errors made INVALID_ARGUMENT.
#[derive(Debug, Clone)]
pub struct RequestDecoder<U>(ProstDecoder<U>);

impl<T, U> Codec for RequestCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(self.0.decoder())
    }
}

impl<U: Message + Default> Decoder for RequestDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| {
            if s.code() == Code::Internal {
                crate::status(
                    Code::InvalidArgument,
                    "BAD_REQUEST",
                    format!("the message does not decode: {}", s.message()),
                )
            } else {
                s
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
