#[cfg(feature = "build-server")]
fn should_build_server() -> bool {
    true
}

#[cfg(not(feature = "build-server"))]
fn should_build_server() -> bool {
    false
}

// tlsfront: the one change from the release (see vendor/README.md in
// tlsfront). prost-build runs `protoc`, which no Rust toolchain brings;
// unless `PROTOC` names one, use the copy the `protoc-bin-vendored` crate
// carries (with its well-known types, for `google/protobuf/descriptor.proto`),
// so that a fresh machine builds with nothing installed by hand, and every
// machine with the same protoc.
fn vendored_protoc() {
    if std::env::var_os("PROTOC").is_some() {
        return;
    }
    let protoc = protoc_bin_vendored::protoc_bin_path()
        .expect("protoc-bin-vendored has no protoc for this host: set PROTOC");
    std::env::set_var("PROTOC", protoc);
    if std::env::var_os("PROTOC_INCLUDE").is_none() {
        if let Ok(include) = protoc_bin_vendored::include_path() {
            std::env::set_var("PROTOC_INCLUDE", include);
        }
    }
}

fn main() {
    vendored_protoc();
    println!("cargo:rerun-if-env-changed=PROTOC");
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");

    tonic_prost_build::configure()
        .build_server(should_build_server())
        .compile_protos(
            &[
                "proto/etcd/api/authpb/auth.proto",
                "proto/etcd/api/etcdserverpb/rpc.proto",
                "proto/etcd/api/mvccpb/kv.proto",
                "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
                "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
            ],
            &[proto_root],
        )
        .expect("Failed to compile proto files");
}
