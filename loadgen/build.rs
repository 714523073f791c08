// The same build facts as the server's (git commit, rustc, profile).
include!("../build.rs");
