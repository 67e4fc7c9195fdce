//! The exactness probe's decoder under each CPU policy, in a test binary of its own because the
//! policy is process-wide. float32 is where the CPU's kernels depend on the row count (BLAS
//! sgemm, and the attention built on it): under the upstream policy verification differs from
//! decode from k = 4, so the comparison demonstrably fails on real kernels, and under the
//! streamed policy (overlays 0009 and 0010) every row is identical.

use mlx_sys::qmm_policy;

const SPEC: &str = "preset=small;layers=2;prompt=24;k_max=8;dtype=f32;ops=0;decoder=1";

fn identical_rows(json: &str) -> (u32, u32) {
    let mut same = 0;
    let mut all = 0;
    for part in json.split("\"logit_rows\":").skip(1) {
        let n = |s: &str| {
            s.split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse::<u32>()
                .unwrap()
        };
        all += n(part);
        let i = part.find("\"logit_rows_identical\":").unwrap() + "\"logit_rows_identical\":".len();
        same += n(&part[i..]);
    }
    (same, all)
}

#[test]
fn float32_verification_differs_upstream_and_is_exact_streamed() {
    assert!(
        qmm_policy::available(),
        "the CPU policy overlay (0002) is not in the built MLX"
    );
    qmm_policy::set_streamed(false).unwrap();
    let upstream = mlx_sys::exactness_probe(SPEC).unwrap();
    qmm_policy::set_streamed(true).unwrap();
    let streamed = mlx_sys::exactness_probe(SPEC).unwrap();
    let (same, all) = identical_rows(&upstream);
    assert_eq!(all, (2..=8).sum::<u32>(), "{upstream}");
    assert!(
        same < all,
        "the upstream policy gave every row: the control did not fail\n{upstream}"
    );
    assert!(upstream.contains("\"op\":\"sdpa\""), "{upstream}");
    assert_eq!(identical_rows(&streamed), (all, all), "{streamed}");

    // mlx-lm's KV cache (cache=step): 250 cached rows, so decode grows the 256-row buffer and
    // the verify blocks from k = 7 cross its end (trimmed, then grown): the same verdicts.
    let step = format!("{SPEC};prompt=250;cache=step");
    qmm_policy::set_streamed(false).unwrap();
    let upstream = mlx_sys::exactness_probe(&step).unwrap();
    qmm_policy::set_streamed(true).unwrap();
    let streamed = mlx_sys::exactness_probe(&step).unwrap();
    assert!(streamed.contains("\"cache\":\"step\""), "{streamed}");
    assert!(identical_rows(&upstream).0 < all, "{upstream}");
    assert_eq!(identical_rows(&streamed), (all, all), "{streamed}");
}
