//! Build script: with the `python` feature, makes PyO3's configuration cfgs (such as
//! `Py_GIL_DISABLED`, for CPython's free-threaded build) available to the bindings.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(Py_GIL_DISABLED)");
    #[cfg(feature = "python")]
    pyo3_build_config::use_pyo3_cfgs();
}
