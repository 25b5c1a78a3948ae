//! Which of a machine's GPUs can serve which of a bid's GPUs, when each of the bid's GPUs has its
//! own overclock terms: a bipartite matching over at most 16 × 16, as bit masks.
//!
//! `compat[i]` has bit `g` set when machine GPU `g` can serve the bid's GPU `i` (class, free
//! memory, overclock range, price). The program uses it to decide whether a bid is feasible on a
//! machine; the agent uses it to choose GPU indices.

/// Most GPUs on either side.
pub const MAX: usize = 16;

const NONE: u8 = u8::MAX;

/// An assignment of the bid's GPUs to distinct machine GPUs (`out[i]` serves bid GPU `i`), or
/// `None` when no assignment exists. Kuhn's augmenting paths: O(n³) bit operations at n ≤ 16.
pub fn assign(compat: &[u16]) -> Option<[u8; MAX]> {
    if compat.len() > MAX {
        return None;
    }
    let mut owner = [NONE; MAX];
    for i in 0..compat.len() {
        let mut seen = 0u16;
        if !augment(i, compat, &mut owner, &mut seen) {
            return None;
        }
    }
    let mut out = [NONE; MAX];
    for (g, &i) in owner.iter().enumerate() {
        if i != NONE {
            out[i as usize] = g as u8;
        }
    }
    Some(out)
}

fn augment(i: usize, compat: &[u16], owner: &mut [u8; MAX], seen: &mut u16) -> bool {
    for g in 0..MAX {
        let bit = 1u16 << g;
        if compat[i] & bit == 0 || *seen & bit != 0 {
            continue;
        }
        *seen |= bit;
        if owner[g] == NONE || augment(owner[g] as usize, compat, owner, seen) {
            owner[g] = i as u8;
            return true;
        }
    }
    false
}

/// Whether `chosen` (machine GPU per bid GPU) is a valid assignment: distinct, and each chosen GPU
/// compatible with its bid GPU. The first bad position otherwise.
pub fn check(compat: &[u16], chosen: &[u8]) -> Result<(), AssignError> {
    if chosen.len() != compat.len() {
        return Err(AssignError::Count);
    }
    let mut used = 0u16;
    for (i, &g) in chosen.iter().enumerate() {
        if g as usize >= MAX {
            return Err(AssignError::Unknown(i));
        }
        let bit = 1u16 << g;
        if used & bit != 0 {
            return Err(AssignError::Duplicate(i));
        }
        if compat[i] & bit == 0 {
            return Err(AssignError::Incompatible(i));
        }
        used |= bit;
    }
    Ok(())
}

/// Why a chosen assignment is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignError {
    /// Not one machine GPU per bid GPU.
    Count,
    /// Position `i` names a GPU index the machine does not have.
    Unknown(usize),
    /// Position `i` repeats a GPU already chosen.
    Duplicate(usize),
    /// Position `i` names a GPU that cannot serve the bid's GPU `i`.
    Incompatible(usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brute(compat: &[u16], i: usize, used: u16) -> bool {
        if i == compat.len() {
            return true;
        }
        (0..MAX).any(|g| {
            let bit = 1 << g;
            compat[i] & bit != 0 && used & bit == 0 && brute(compat, i + 1, used | bit)
        })
    }

    #[test]
    fn uniform_terms_need_only_enough_gpus() {
        assert!(assign(&[0b1011; 3]).is_some());
        assert!(assign(&[0b1011; 4]).is_none());
    }

    #[test]
    fn augmenting_paths_move_earlier_choices() {
        // Bid GPU 0 fits GPUs 0 and 1, bid GPU 1 only GPU 0: 0 must move to 1.
        let a = assign(&[0b11, 0b01]).unwrap();
        assert_eq!(&a[..2], &[1, 0]);
    }

    #[test]
    fn check_names_the_first_bad_position() {
        let compat = [0b0110, 0b0110];
        assert_eq!(check(&compat, &[1, 2]), Ok(()));
        assert_eq!(check(&compat, &[1, 1]), Err(AssignError::Duplicate(1)));
        assert_eq!(check(&compat, &[1, 16]), Err(AssignError::Unknown(1)));
        assert_eq!(check(&compat, &[0, 2]), Err(AssignError::Incompatible(0)));
        assert_eq!(check(&compat, &[1]), Err(AssignError::Count));
    }

    proptest! {
        #[test]
        fn assign_agrees_with_brute_force(compat in proptest::collection::vec(0u16..=0x3f, 0..6)) {
            // Six machine GPUs keep the brute force small.
            let found = assign(&compat);
            prop_assert_eq!(found.is_some(), brute(&compat, 0, 0));
            if let Some(a) = found {
                prop_assert_eq!(check(&compat, &a[..compat.len()]), Ok(()));
            }
        }
    }
}
