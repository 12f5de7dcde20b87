//! Build script: with the `python` feature, makes PyO3's configuration cfgs (the Python
//! version, such as `Py_3_12`, and `Py_GIL_DISABLED` for CPython's free-threaded build)
//! available to the bindings, the only code that uses them.

fn main() {
    // Declared whatever the features, so that builds without Python (the Rust tests and
    // benches) do not warn about the cfgs the bindings' module list names.
    println!("cargo::rustc-check-cfg=cfg(Py_GIL_DISABLED)");
    println!("cargo::rustc-check-cfg=cfg(PyPy)");
    #[cfg(feature = "python")]
    pyo3_build_config::use_pyo3_cfgs();
}
