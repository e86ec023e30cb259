//! Branch prediction for `--branch-sim=yes`, exactly as `cachegrind/cg_branchpred.c` (3.19,
//! shared by Callgrind): a global-history table of 2-bit counters for conditional branches and
//! a branch-target table for indirect branches.
//!
//! # Invariants
//! * Conditional: 2^14 counters, all 0 at start, each in `0..=3`. Index =
//!   `(history & 0x7F) << 7 | (instr_addr & 0x7F)` (x86 has no always-zero address bits).
//!   A counter `>= 2` predicts taken. After predicting, the history shifts in the actual
//!   outcome and the counter moves one step toward it, saturating at 0 and 3.
//! * Indirect: 512 targets, all 0 at start, index `instr_addr & 0x1FF`. A mispredict is
//!   "stored target != actual target"; the actual target is then stored.
//!
//! # Not done here
//! No return-address prediction (Cachegrind assumes returns always predict), no counting of
//! Bc/Bcm/Bi/Bim (the tool adds the returned booleans to its counters), and no choice of which
//! instruction address to pass (the tool passes the exit's instruction for Bc and the block's
//! last instruction for Bi, as Cachegrind does).

/// History bits in the index (`N_HIST_BITS`).
pub const HIST_BITS: u32 = 7;
/// Instruction-address bits in the index (`N_IADD_BITS`).
pub const IADDR_BITS: u32 = 7;
/// Number of 2-bit counters, `2^(HIST_BITS + IADDR_BITS)` = 16384.
pub const N_COUNTERS: usize = 1 << (HIST_BITS + IADDR_BITS);
/// Number of branch-target entries (`N_BTAC`), 512.
pub const N_BTAC: usize = 1 << 9;

const HIST_MASK: u64 = (1 << HIST_BITS) - 1;
const IADDR_MASK: u64 = (1 << IADDR_BITS) - 1;
const BTAC_MASK: u64 = N_BTAC as u64 - 1;

/// Cachegrind's conditional and indirect branch predictors, one per simulated thread.
#[repr(C)]
#[derive(Clone, Debug)]
pub struct BranchPredictor {
    /// Global history of taken bits, newest in bit 0.
    shift_register: u64,
    /// Two-bit saturating counters.
    counters: [u8; N_COUNTERS],
    /// Last target seen per index.
    btac: [u64; N_BTAC],
}

impl BranchPredictor {
    /// A predictor in Cachegrind's start state (everything zero), boxed because it is 20 KiB
    /// and generated code holds a pointer to it.
    pub fn new() -> Box<BranchPredictor> {
        Box::new(BranchPredictor {
            shift_register: 0,
            counters: [0; N_COUNTERS],
            btac: [0; N_BTAC],
        })
    }

    /// The counter index for a conditional branch at `instr_addr` given the current history.
    pub fn cond_index(&self, instr_addr: u64) -> usize {
        (((self.shift_register & HIST_MASK) << IADDR_BITS) | (instr_addr & IADDR_MASK)) as usize
    }

    /// A conditional branch at `instr_addr` was executed and `taken` or not. Returns `true`
    /// if the predictor got it wrong (a `Bcm`). Panic-free (masked index into a fixed array).
    pub fn cond(&mut self, instr_addr: u64, taken: bool) -> bool {
        let index = self.cond_index(instr_addr) & (N_COUNTERS - 1);
        let counter = &mut self.counters[index];
        let predicted_taken = *counter >= 2;
        self.shift_register = (self.shift_register << 1) | u64::from(taken);
        if taken {
            if *counter < 3 {
                *counter += 1;
            }
        } else if *counter > 0 {
            *counter -= 1;
        }
        predicted_taken != taken
        // Post-invariant: *counter in 0..=3.
    }

    /// An indirect branch at `instr_addr` went to `target`. Returns `true` on a mispredict (a
    /// `Bim`). Panic-free (masked index into a fixed array).
    pub fn indirect(&mut self, instr_addr: u64, target: u64) -> bool {
        let slot = &mut self.btac[(instr_addr & BTAC_MASK) as usize];
        let mispredict = *slot != target;
        *slot = target;
        mispredict
    }

    /// The counter values (for inspection and tests).
    pub fn counters(&self) -> &[u8; N_COUNTERS] {
        &self.counters
    }

    /// The global history register.
    pub fn history(&self) -> u64 {
        self.shift_register
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_predicting_not_taken() {
        let mut p = BranchPredictor::new();
        assert!(!p.cond(0x401000, false));
        let mut p = BranchPredictor::new();
        assert!(p.cond(0x401000, true));
    }

    #[test]
    fn index_combines_history_and_address_like_cachegrind() {
        let mut p = BranchPredictor::new();
        assert_eq!(p.cond_index(0x4012_34ff), 0x7f);
        p.cond(0, true);
        p.cond(0, false);
        p.cond(0, true);
        assert_eq!(p.history(), 0b101);
        assert_eq!(p.cond_index(0x81), (0b101 << 7) | 1);
        // Only 7 history bits take part.
        for _ in 0..10 {
            p.cond(0, true);
        }
        assert_eq!(p.cond_index(0), 0x7f << 7);
    }

    #[test]
    fn always_taken_loop_branch_learns_after_history_saturates() {
        // One branch, always taken: the history walks through 0, 1, 3, 7, ..., 0x7f, each a
        // fresh counter at 0 (mispredict), then stays at 0x7f where the counter goes 0->1
        // (mispredict), 1->2 (mispredict), and then predicts taken forever.
        let mut p = BranchPredictor::new();
        let misses: Vec<bool> = (0..20).map(|_| p.cond(0x400123, true)).collect();
        let first_hit = misses.iter().position(|m| !m).expect("learns");
        assert_eq!(first_hit, 9); // 7 fresh histories + 2 warm-up steps at history 0x7f
        assert!(misses[first_hit..].iter().all(|m| !m));
        assert_eq!(p.counters()[(0x7f << 7) | 0x23], 3);
    }

    #[test]
    fn counters_saturate() {
        // Never-taken at history 0: counter stays at 0 and never mispredicts.
        let mut p = BranchPredictor::new();
        for _ in 0..100 {
            assert!(!p.cond(0x10, false));
        }
        assert_eq!(p.counters()[0x10], 0);
    }

    #[test]
    fn alternating_branch_pattern() {
        // T,N,T,N at one address: history alternates between ...0101 and ...1010 so two
        // counters are used; after warm-up both predict correctly.
        let mut p = BranchPredictor::new();
        let mut late_misses = 0;
        for i in 0..200 {
            let m = p.cond(0x2000, i % 2 == 0);
            if i >= 50 {
                late_misses += u32::from(m);
            }
        }
        assert_eq!(late_misses, 0);
    }

    #[test]
    fn indirect_predicts_last_target_per_slot() {
        let mut p = BranchPredictor::new();
        assert!(!p.indirect(0x400000, 0), "initial target 0");
        assert!(p.indirect(0x400000, 0x401000));
        assert!(!p.indirect(0x400000, 0x401000));
        assert!(p.indirect(0x400000, 0x402000));
        // 0x400200 aliases 0x400000 (same low 9 bits).
        assert!(p.indirect(0x400200, 0x403000));
        assert!(p.indirect(0x400000, 0x402000));
        // A different slot is independent.
        assert!(p.indirect(0x400001, 0x402000));
        assert!(!p.indirect(0x400001, 0x402000));
    }
}
