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
                let mut value: $t = anchor_lang::__private::bytemuck::Zeroable::zeroed();
                reader.read_exact(anchor_lang::__private::bytemuck::bytes_of_mut(&mut value))?;
                Ok(value)
            }
        }
    };
}
pub(crate) use pod_borsh;

/// A fixed table of plain-old-data values in an account, Borsh-coded as one copy (see
/// `pod_borsh!`): the derived code reads and writes an array one element at a time, which every
/// instruction loading the account pays for (a machine holds four such tables, a market three).
/// The bytes are the array's. Index it like the array it wraps.
macro_rules! pod_array {
    ($name:ident, $elem:tt, $len:tt, $what:literal) => {
        #[doc = $what]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
        #[repr(transparent)]
        pub struct $name(pub [$elem; $len]);

        // SAFETY: a transparent wrapper of an array of `Pod` values: no padding, every bit
        // pattern valid.
        unsafe impl anchor_lang::__private::bytemuck::Zeroable for $name {}
        unsafe impl anchor_lang::__private::bytemuck::Pod for $name {}
        crate::state::pod_borsh!($name);

        impl anchor_lang::Space for $name {
            const INIT_SPACE: usize = core::mem::size_of::<[$elem; $len]>();
        }

        impl Default for $name {
            fn default() -> Self {
                anchor_lang::__private::bytemuck::Zeroable::zeroed()
            }
        }

        impl core::ops::Deref for $name {
            type Target = [$elem; $len];
            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }

        impl core::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.0
            }
        }

        impl IntoIterator for $name {
            type Item = $elem;
            type IntoIter = core::array::IntoIter<$elem, $len>;
            fn into_iter(self) -> Self::IntoIter {
                self.0.into_iter()
            }
        }

        impl<'a> IntoIterator for &'a $name {
            type Item = &'a $elem;
            type IntoIter = core::slice::Iter<'a, $elem>;
            fn into_iter(self) -> Self::IntoIter {
                self.0.iter()
            }
        }
    };
}
pub(crate) use pod_array;

/// An account whose fixed fields live in one plain-old-data struct `$data` (its field `data`,
/// read and written through `Deref`), Borsh-coded as one copy (`pod_borsh!`): the derived code
/// took one call per field on every load and store.
///
/// SAFETY (the caller's): `$data` is `repr(C)` of integers, keys, byte arrays and `Pod` values
/// only, with no padding (its size pinned by a `const` assertion where it is declared): every bit
/// pattern is a valid value.
macro_rules! account_data {
    ($account:ty, $data:ty) => {
        unsafe impl anchor_lang::__private::bytemuck::Zeroable for $data {}
        unsafe impl anchor_lang::__private::bytemuck::Pod for $data {}
        crate::state::pod_borsh!($data);

        impl anchor_lang::Space for $data {
            const INIT_SPACE: usize = core::mem::size_of::<$data>();
        }

        impl core::ops::Deref for $account {
            type Target = $data;
            fn deref(&self) -> &$data {
                &self.data
            }
        }

        impl core::ops::DerefMut for $account {
            fn deref_mut(&mut self) -> &mut $data {
                &mut self.data
            }
        }
    };
}
pub(crate) use account_data;

pub mod bid;
pub mod book;
pub mod env;
pub mod lease;
pub mod machine;
pub mod market;
pub mod reservation;
pub mod seeds;
pub mod stake;
pub mod walk;

pub use bid::*;
pub use book::*;
pub use env::*;
pub use lease::*;
pub use machine::*;
pub use market::*;
pub use reservation::*;
pub use stake::*;
pub use walk::*;
