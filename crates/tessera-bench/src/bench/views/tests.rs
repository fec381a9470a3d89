//! Unit tests of the views experiment's rows and tables.

use super::rows::paper_mib;
use super::{column_block_pattern, groups, turns};
use crate::workers::MatrixDistribution;

#[test]
fn the_pattern_layout_gives_each_star_block_share_to_one_server() {
    const N: u64 = 64;
    let pattern = column_block_pattern(N).unwrap();
    for (rank, server_type) in pattern.iter().enumerate() {
        assert_eq!((server_type.lb(), server_type.extent()), (0, 64));
        let share = MatrixDistribution::StarBlock.filetype(N, rank).unwrap();
        let share: Vec<_> = share.runs(0, 0, share.size()).unwrap().collect();
        let server: Vec<_> = server_type.runs(0, 0, N * N / 4).unwrap().collect();
        assert_eq!(share, server, "rank {rank}");
    }
}

#[test]
fn list_and_view_on_stripes_share_a_group_and_each_method_of_the_match_runs_alone() {
    let turns = turns();
    let named = |group: &Vec<usize>| -> Vec<(&str, &str)> {
        group
            .iter()
            .map(|&index| (turns[index].distribution.name(), turns[index].method()))
            .collect()
    };
    let groups: Vec<_> = groups(&turns).iter().map(named).collect();
    assert_eq!(
        groups,
        [
            vec![("(BLOCK,BLOCK)", "list"), ("(BLOCK,BLOCK)", "view")],
            vec![("(*,BLOCK)", "list"), ("(*,BLOCK)", "view")],
            vec![("(*,BLOCK)", "view-pattern")],
            vec![("(*,BLOCK)", "contiguous")],
            vec![("(CYCLIC,CYCLIC)", "list"), ("(CYCLIC,CYCLIC)", "view")],
        ]
    );
}

#[test]
fn paper_sizes_are_found_for_square_mebibyte_matrices() {
    assert_eq!(paper_mib(1024), Some(1));
    assert_eq!(paper_mib(2048), Some(4));
    assert_eq!(paper_mib(4096), Some(16));
    assert_eq!(paper_mib(512), None);
}
