//! Field codecs: how integers, strings, byte strings, lists and options are encoded inside
//! message bodies. Strings are paths unless a type says otherwise; lists carry their own
//! limits.

use tessera_dtype::Datatype;

use crate::codec::{Decoder, Encoder, Wire};
use crate::error::WireError;
use crate::layout::Layout;
use crate::limits::{PATH_BYTES_MAX, SERVERS_MAX};

impl Wire for u16 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u16(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u16()
    }
}

impl Wire for u32 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u32(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u32()
    }
}

impl Wire for u64 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u64(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u64()
    }
}

impl Wire for bool {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.bool(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.bool()
    }
}

impl Wire for String {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.str(self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.str("path_bytes_max", PATH_BYTES_MAX)
    }
}

impl Wire for Datatype {
    fn encode(&self, encoder: &mut Encoder) {
        let bytes = tessera_dtype::wire::encode(self)
            .expect("types sent on the wire were checked against the limits when built");
        encoder.bytes(&bytes);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let bytes = decoder.bytes(
            "datatype_encoded_bytes_max",
            tessera_dtype::DATATYPE_ENCODED_BYTES_MAX,
        )?;
        tessera_dtype::wire::decode(bytes).map_err(|err| WireError::Datatype(err.to_string()))
    }
}

impl Wire for Vec<Datatype> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for datatype in self {
            datatype.encode(encoder);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("servers_max", SERVERS_MAX, 14)?;
        (0..count).map(|_| Datatype::decode(decoder)).collect()
    }
}

impl Wire for Option<Layout> {
    fn encode(&self, encoder: &mut Encoder) {
        match self {
            None => encoder.u8(0),
            Some(layout) => {
                encoder.u8(1);
                layout.encode(encoder);
            }
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            0 => Ok(None),
            1 => Ok(Some(Layout::decode(decoder)?)),
            other => Err(WireError::BadValue {
                field: "layout tag",
                value: u64::from(other),
            }),
        }
    }
}
