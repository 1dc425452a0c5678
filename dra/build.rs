// Generates the kubelet's DRA plugin API (dra.v1), its DRA health API
// (dra-health v1alpha1) and the plugin-watcher Registration API from proto/
// (copied verbatim from the Kubernetes 1.36 tree,
// staging/src/k8s.io/kubelet/pkg/apis/{dra,pluginregistration}/v1 and
// dra-health/v1alpha1)
// with protoc (Debian: protobuf-compiler; or set PROTOC).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(
            &[
                "proto/dra_v1.proto",
                "proto/dra_health_v1alpha1.proto",
                "proto/pluginregistration_v1.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
