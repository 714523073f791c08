//! The bodies of `GET /leaderz` and `GET /cellz`, from what a node's
//! replicas published on its [`Board`]: pure, so the HTTP edge only picks
//! the status and writes them out.

use super::board::{role_name, Board, Published};
use super::unity::Unity;
use raft::StateRole;
use serde_json::json;

/// `/leaderz`: whether this node leads every group and lets each shard
/// write (HAProxy's `option httpchk GET /leaderz` prefers it then), and
/// a line saying why; without a board (no `--cell`) a single node takes
/// every write.
pub fn leaderz(board: Option<&Board>) -> (bool, String) {
    let Some(board) = board else { return (true, "single node: it takes every write".to_string()) };
    let groups = board.groups();
    let leads = groups.iter().filter(|p| p.leading).count();
    let mut why = format!("node {}: leads {leads} of {} groups", board.node(), groups.len());
    for (group, p) in groups.iter().enumerate().filter(|(_, p)| !p.leading) {
        why.push_str(&format!("; group {group}: {}", not_leading(p)));
    }
    (leads == groups.len(), why)
}

/// Why a group's replica does not let its shard write.
fn not_leading(p: &Published) -> String {
    let role = role_name(p.view.role);
    match (p.view.role, p.view.leader) {
        (StateRole::Leader, _) => format!("{role}, not yet writing (its term's first entry is not applied)"),
        (_, Some(l)) => format!("{role}, leader is node {l}"),
        (_, None) => format!("{role}, no leader known"),
    }
}

/// `/cellz`: the node and every group as its replica sees it, as JSON;
/// with more than one shard a node also whether requests that span groups
/// run here now (`whole`: it leads every group, its shards retold).
pub fn cellz(board: &Board, unity: Option<&Unity>) -> String {
    let groups: Vec<_> = board.groups().iter().enumerate().map(|(group, p)| group_json(group, p)).collect();
    let mut v = json!({ "node": board.node(), "groups": groups });
    if let Some(u) = unity {
        v["whole"] = json!(u.whole());
    }
    v.to_string()
}

fn group_json(group: usize, p: &Published) -> serde_json::Value {
    let v = &p.view;
    let mut g = json!({
        "group": group,
        "role": role_name(v.role),
        "term": v.term,
        "leader": v.leader,
        "commit": v.commit,
        "last_index": v.last_index,
        "applied": p.applied,
        "writable": p.leading,
        "voters": p.members.voters,
        "learners": p.members.learners,
    });
    if v.role == StateRole::Leader {
        let followers: Vec<_> = v
            .followers
            .iter()
            .map(|f| json!({ "id": f.id, "match": f.matched, "lag": f.lag, "needs_copy": f.needs_copy }))
            .collect();
        g["followers"] = json!(followers);
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::board::{Members, Scalars};
    use crate::cell::group::FollowerView;

    fn scalars(role: StateRole, leader: Option<u64>, leading: bool) -> Scalars {
        Scalars { role, term: 7, leader, commit: 40, last_index: 42, applied: 39, leading }
    }

    #[test]
    fn leaderz_is_true_only_when_every_group_writes() {
        assert_eq!(leaderz(None), (true, "single node: it takes every write".to_string()));
        let board = Board::new(2, 2);
        board.slot(0).publish(&scalars(StateRole::Leader, Some(2), true));
        board.slot(1).publish(&scalars(StateRole::Follower, Some(3), false));
        assert_eq!(
            leaderz(Some(&board)),
            (false, "node 2: leads 1 of 2 groups; group 1: follower, leader is node 3".into())
        );
        board.slot(1).publish(&scalars(StateRole::Leader, Some(2), false));
        let (ok, why) = leaderz(Some(&board));
        assert!(
            !ok && why.ends_with("group 1: leader, not yet writing (its term's first entry is not applied)"),
            "{why}"
        );
        board.slot(1).publish(&scalars(StateRole::PreCandidate, None, false));
        assert!(leaderz(Some(&board)).1.ends_with("group 1: pre_candidate, no leader known"));
        board.slot(1).publish(&scalars(StateRole::Leader, Some(2), true));
        assert_eq!(leaderz(Some(&board)), (true, "node 2: leads 2 of 2 groups".into()));
    }

    #[test]
    fn cellz_names_each_group_and_a_leaders_followers() {
        let board = Board::new(1, 2);
        board.slot(0).publish(&scalars(StateRole::Leader, Some(1), true));
        let followers = [
            FollowerView { id: 2, matched: 42, lag: 0, needs_copy: false },
            FollowerView { id: 3, matched: 30, lag: 12, needs_copy: true },
        ];
        board.slot(0).publish_followers(&followers);
        board.slot(0).publish_members(&Members { voters: vec![1, 2, 3], learners: vec![4] });
        board.slot(1).publish(&scalars(StateRole::Candidate, None, false));
        let v: serde_json::Value = serde_json::from_str(&cellz(&board, None)).unwrap();
        assert_eq!(v["node"], 1);
        assert!(v.get("whole").is_none(), "one shard a node: always whole, not shown");
        let g0 = &v["groups"][0];
        assert_eq!(
            g0,
            &json!({"group": 0, "role": "leader", "term": 7, "leader": 1, "commit": 40, "last_index": 42, "applied": 39,
                "writable": true, "voters": [1, 2, 3], "learners": [4],
                "followers": [{"id": 2, "match": 42, "lag": 0, "needs_copy": false},
                    {"id": 3, "match": 30, "lag": 12, "needs_copy": true}]})
        );
        let g1 = &v["groups"][1];
        assert_eq!((g1["group"].as_u64(), g1["role"].as_str()), (Some(1), Some("candidate")));
        assert!(g1["leader"].is_null() && g1.get("followers").is_none(), "{g1}");
        let unity = Unity::new(2);
        let whole =
            |u: &Unity| serde_json::from_str::<serde_json::Value>(&cellz(&board, Some(u))).unwrap()["whole"].clone();
        assert_eq!(whole(&unity), json!(false));
        unity.set_leads(0, true);
        unity.set_leads(1, true);
        unity.told(unity.due().unwrap());
        assert_eq!(whole(&unity), json!(true));
    }
}
