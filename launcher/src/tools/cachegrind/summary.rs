//! The end-of-run summary Cachegrind prints on its log (`cg_fini` in Valgrind 3.19): I refs,
//! I1/LLi misses and rates, D refs split rd + wr, D1/LLd, LL, and the branch lines.
use cachesim::geometry::with_commas;

/// Event totals, in Cachegrind's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub ir: u64,
    pub i1mr: u64,
    pub ilmr: u64,
    pub dr: u64,
    pub d1mr: u64,
    pub dlmr: u64,
    pub dw: u64,
    pub d1mw: u64,
    pub dlmw: u64,
    pub bc: u64,
    pub bcm: u64,
    pub bi: u64,
    pub bim: u64,
}

/// `ULong_width`: characters of `n` printed with thousands separators.
fn width(n: u64) -> usize {
    let digits = n.to_string().len();
    digits + (digits - 1) / 3
}

fn num(n: u64, w: usize) -> String {
    format!("{:>w$}", with_commas(n as i64))
}

fn pct(x: f64, w: usize, prec: usize) -> String {
    format!("{x:>w$.prec$}")
}

/// The summary lines (without the `==PID== ` prefix), Valgrind's layout.
pub fn lines(t: &Totals, cache_sim: bool, branch_sim: bool) -> Vec<String> {
    let l1 = width(t.ir);
    let l2 = width(t.dr.max(t.bc));
    let l3 = width(t.dw.max(t.bi));
    let mut out = vec![format!("I   refs:      {}", num(t.ir, l1))];
    if cache_sim {
        out.push(format!("I1  misses:    {}", num(t.i1mr, l1)));
        out.push(format!("LLi misses:    {}", num(t.ilmr, l1)));
        let ir = t.ir.max(1) as f64;
        out.push(format!(
            "I1  miss rate: {}%",
            pct(t.i1mr as f64 * 100.0 / ir, l1, 2)
        ));
        out.push(format!(
            "LLi miss rate: {}%",
            pct(t.ilmr as f64 * 100.0 / ir, l1, 2)
        ));
        out.push(String::new());
        let three = |label: &str, a: u64, b: u64, c: u64| {
            format!(
                "{label} {}  ({} rd   + {} wr)",
                num(a, l1),
                num(b, l2),
                num(c, l3)
            )
        };
        let d = t.dr + t.dw;
        out.push(three("D   refs:     ", d, t.dr, t.dw));
        out.push(three("D1  misses:   ", t.d1mr + t.d1mw, t.d1mr, t.d1mw));
        out.push(three("LLd misses:   ", t.dlmr + t.dlmw, t.dlmr, t.dlmw));
        let (da, dra, dwa) = (d.max(1) as f64, t.dr.max(1) as f64, t.dw.max(1) as f64);
        let rate = |label: &str, a: f64, b: f64, c: f64| {
            format!(
                "{label} {}% ({}%     + {}%  )",
                pct(a, l1, 1),
                pct(b, l2, 1),
                pct(c, l3, 1)
            )
        };
        out.push(rate(
            "D1  miss rate:",
            (t.d1mr + t.d1mw) as f64 * 100.0 / da,
            t.d1mr as f64 * 100.0 / dra,
            t.d1mw as f64 * 100.0 / dwa,
        ));
        out.push(rate(
            "LLd miss rate:",
            (t.dlmr + t.dlmw) as f64 * 100.0 / da,
            t.dlmr as f64 * 100.0 / dra,
            t.dlmw as f64 * 100.0 / dwa,
        ));
        out.push(String::new());
        let ll = t.d1mr + t.d1mw + t.i1mr;
        out.push(three("LL refs:      ", ll, t.d1mr + t.i1mr, t.d1mw));
        let llm = t.dlmr + t.dlmw + t.ilmr;
        out.push(three("LL misses:    ", llm, t.dlmr + t.ilmr, t.dlmw));
        // Valgrind divides by the real totals here (only D_total/Dr_total/Dw_total were
        // bumped to 1 when zero).
        out.push(rate(
            "LL miss rate: ",
            llm as f64 * 100.0 / (t.ir.max(1) as f64 + da),
            (t.dlmr + t.ilmr) as f64 * 100.0 / (t.ir.max(1) as f64 + dra),
            t.dlmw as f64 * 100.0 / dwa,
        ));
    }
    if branch_sim {
        let (bc, bi) = (t.bc.max(1), t.bi.max(1));
        let b = bc + bi;
        let bm = t.bcm + t.bim;
        out.push(String::new());
        out.push(format!(
            "Branches:      {}  ({} cond + {} ind)",
            num(b, l1),
            num(bc, l2),
            num(bi, l3)
        ));
        out.push(format!(
            "Mispredicts:   {}  ({} cond + {} ind)",
            num(bm, l1),
            num(t.bcm, l2),
            num(t.bim, l3)
        ));
        out.push(format!(
            "Mispred rate:  {}% ({}%     + {}%   )",
            pct(bm as f64 * 100.0 / b as f64, l1, 1),
            pct(t.bcm as f64 * 100.0 / bc as f64, l2, 1),
            pct(t.bim as f64 * 100.0 / bi as f64, l3, 1)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers of a real Valgrind 3.19 run of `hello` with cache and branch simulation.
    fn hello() -> Totals {
        Totals {
            ir: 128_090,
            i1mr: 1_205,
            ilmr: 1_186,
            dr: 29_121,
            d1mr: 1_201,
            dlmr: 990,
            dw: 10_504,
            d1mw: 378,
            dlmw: 348,
            bc: 25_555,
            bcm: 3_218,
            bi: 292,
            bim: 155,
        }
    }

    #[test]
    fn matches_valgrind_layout() {
        let got = lines(&hello(), true, true);
        let want = [
            "I   refs:      128,090",
            "I1  misses:      1,205",
            "LLi misses:      1,186",
            "I1  miss rate:    0.94%",
            "LLi miss rate:    0.93%",
            "",
            "D   refs:       39,625  (29,121 rd   + 10,504 wr)",
            "D1  misses:      1,579  ( 1,201 rd   +    378 wr)",
            "LLd misses:      1,338  (   990 rd   +    348 wr)",
            "D1  miss rate:     4.0% (   4.1%     +    3.6%  )",
            "LLd miss rate:     3.4% (   3.4%     +    3.3%  )",
            "",
            "LL refs:         2,784  ( 2,406 rd   +    378 wr)",
            "LL misses:       2,524  ( 2,176 rd   +    348 wr)",
            "LL miss rate:      1.5% (   1.4%     +    3.3%  )",
            "",
            "Branches:       25,847  (25,555 cond +    292 ind)",
            "Mispredicts:     3,373  ( 3,218 cond +    155 ind)",
            "Mispred rate:     13.0% (  12.6%     +   53.1%   )",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn branch_only_widths_come_from_branch_counts() {
        let mut t = hello();
        (t.dr, t.dw) = (0, 0);
        let got = lines(&t, false, true);
        assert_eq!(got[0], "I   refs:      128,090");
        assert_eq!(got[2], "Branches:       25,847  (25,555 cond + 292 ind)");
        assert_eq!(got[4], "Mispred rate:     13.0% (  12.6%     + 53.1%   )");
        assert_eq!(lines(&t, false, false).len(), 1);
    }
}
