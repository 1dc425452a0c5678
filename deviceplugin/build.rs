// Generates the v1beta1 client and server from proto/ with protoc (Debian:
// protobuf-compiler; or set PROTOC).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&["proto/deviceplugin_v1beta1.proto"], &["proto"])?;
    Ok(())
}
