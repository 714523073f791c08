pub mod eraftpb {
include!("eraftpb.rs");
include!("wrapper_eraftpb.rs");
}

