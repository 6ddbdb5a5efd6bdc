//! `cohort`: the server, the cluster node, the load generator, the demo, the index and data
//! tools (the command line is the library's, `cohort_cli::command`).

fn main() {
    cohort_cli::main()
}
