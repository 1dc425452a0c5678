// Link arguments for libgpuquota.so (build.rs rather than .cargo/config.toml so
// that `cargo build --manifest-path interceptor/Cargo.toml` from any directory
// gets them).
//  * libdl.so.2 stays NEEDED: on glibc < 2.34 dlopen@GLIBC_2.2.5 and
//    dlvsym@GLIBC_2.2.5 live there (on newer glibc it is an empty stub).
//  * -z now: every import is bound at load time, so nothing is resolved lazily
//    from inside the dlsym entry.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-cdylib-link-arg=-l:libdl.so.2");
        println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,relro");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgpuquota.so");
    }
}
