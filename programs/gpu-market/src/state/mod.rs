/// Borsh for a plain-old-data type as one copy of its bytes, instead of one call per field.
/// The bytes are exactly what the derived Borsh writes (fields in order, little-endian, no
/// padding: `repr(C)` and the size are pinned where it is used, and a test compares), but an
/// array of 16 GPUs decodes and encodes in 16 copies instead of 208 calls: every instruction
/// that loads a machine pays that twice. The IDL build keeps the derive, for the field list.
macro_rules! pod_borsh {
    ($t:ty) => {
        #[cfg(not(feature = "idl-build"))]
        impl anchor_lang::prelude::borsh::BorshSerialize for $t {
            fn serialize<W: anchor_lang::prelude::borsh::io::Write>(
                &self,
                writer: &mut W,
            ) -> anchor_lang::prelude::borsh::io::Result<()> {
                writer.write_all(anchor_lang::__private::bytemuck::bytes_of(self))
            }
        }

        #[cfg(not(feature = "idl-build"))]
        impl anchor_lang::prelude::borsh::BorshDeserialize for $t {
            fn deserialize_reader<R: anchor_lang::prelude::borsh::io::Read>(
                reader: &mut R,
            ) -> anchor_lang::prelude::borsh::io::Result<Self> {
                let mut buf = [0u8; core::mem::size_of::<$t>()];
                reader.read_exact(&mut buf)?;
                Ok(anchor_lang::__private::bytemuck::pod_read_unaligned(&buf))
            }
        }
    };
}
pub(crate) use pod_borsh;

pub mod bid;
pub mod book;
pub mod env;
pub mod lease;
pub mod machine;
pub mod market;
pub mod seeds;
pub mod stake;

pub use bid::*;
pub use book::*;
pub use env::*;
pub use lease::*;
pub use machine::*;
pub use market::*;
pub use stake::*;
