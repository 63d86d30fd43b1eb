//! Embodiment names as clients and upstream spell them: the tag itself (any case) or the name
//! of its `EmbodimentTag` enum member (`gr00t/data/embodiment_tags.py`), e.g. `REAL_G1`.

/// Upstream's `EmbodimentTag` members: (enum name, tag).
pub const ENUM_NAMES: [(&str, &str); 16] = [
    (
        "OXE_DROID_RELATIVE_EEF_RELATIVE_JOINT",
        "oxe_droid_relative_eef_relative_joint",
    ),
    ("XDOF", "xdof_relative_eef_relative_joint"),
    ("XDOF_SUBTASK", "xdof_relative_eef_relative_joint_subtask"),
    ("REAL_G1", "real_g1_relative_eef_relative_joints"),
    ("REAL_R1_PRO_SHARPA", "real_r1_pro_sharpa_relative_eef"),
    (
        "REAL_R1_PRO_SHARPA_HUMAN",
        "real_r1_pro_sharpa_relative_eef_human",
    ),
    (
        "REAL_R1_PRO_SHARPA_MAXINSIGHTS",
        "real_r1_pro_sharpa_relative_eef_maxinsights",
    ),
    (
        "REAL_R1_PRO_SHARPA_MECKA",
        "real_r1_pro_sharpa_relative_eef_mecka",
    ),
    (
        "UNITREE_G1",
        "unitree_g1_full_body_with_waist_height_nav_cmd",
    ),
    ("UNITREE_G1_SONIC", "unitree_g1_sonic"),
    ("SIMPLER_ENV_GOOGLE", "simpler_env_google"),
    ("SIMPLER_ENV_WIDOWX", "simpler_env_widowx"),
    ("LIBERO_PANDA", "libero_sim"),
    ("NEW_EMBODIMENT", "new_embodiment"),
    ("ROBOCASA_GR1_TABLETOP", "robocasa_gr1_tabletop"),
    ("ROBOCASA_PANDA_OMRON", "robocasa_panda_omron"),
];

/// The tag among `tags` that `name` means: the tag itself, in any case, or its enum name.
pub fn resolve<'a>(name: &str, tags: impl IntoIterator<Item = &'a str> + Clone) -> Option<&'a str> {
    let name = name.trim();
    let by_tag = tags
        .clone()
        .into_iter()
        .find(|t| t.eq_ignore_ascii_case(name));
    by_tag.or_else(|| {
        let (_, tag) = ENUM_NAMES
            .iter()
            .find(|(enum_name, _)| enum_name.eq_ignore_ascii_case(name))?;
        tags.into_iter().find(|t| t == tag)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_to_served_tags() {
        let tags = [
            "oxe_droid_relative_eef_relative_joint",
            "new_embodiment",
            "libero_sim",
        ];
        let r = |n: &str| resolve(n, tags.iter().copied());
        assert_eq!(r("new_embodiment"), Some("new_embodiment"));
        assert_eq!(r("NEW_EMBODIMENT"), Some("new_embodiment"));
        assert_eq!(r("LIBERO_PANDA"), Some("libero_sim"));
        assert_eq!(r("libero_panda"), Some("libero_sim"));
        assert_eq!(
            r("OXE_DROID_RELATIVE_EEF_RELATIVE_JOINT"),
            Some("oxe_droid_relative_eef_relative_joint")
        );
        // Known enum names whose tag is not served, and unknown names, resolve to nothing.
        assert_eq!(r("REAL_G1"), None);
        assert_eq!(r("nz100"), None);
        assert_eq!(r(""), None);
    }
}
