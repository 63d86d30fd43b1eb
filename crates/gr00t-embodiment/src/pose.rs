//! End-effector pose maths, as NVIDIA's N1.7 `gr00t/data/state_action/pose.py` defines it.
//!
//! - rot6d is the first two **rows** of the rotation matrix, `[R00, R01, R02, R10, R11, R12]`
//!   (`EndEffectorPose._rot6d_to_matrix` / `_matrix_to_rot6d`); a rot6d is made a rotation by
//!   Gram–Schmidt of those two rows, the third row being their cross product.
//! - rotvec is axis · angle (scipy `Rotation.from_rotvec` / `as_rotvec`, angle in [0, π]).
//! - Poses compose as homogeneous transforms: `T_abs = T_ref · T_rel`
//!   (`action_chunking.py`), i.e. `R = R_ref·R_rel`, `t = R_ref·t_rel + t_ref`.
//! - Euler "XYZ" is scipy's uppercase, *intrinsic* convention: `R = Rx(a)·Ry(b)·Rz(c)`.

/// A 3×3 matrix, row-major (`m[row][col]`).
pub type Mat3 = [[f64; 3]; 3];

/// The identity rotation.
pub const IDENTITY: Mat3 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];

/// The float operations Gram–Schmidt needs, so it runs in the dtype numpy used (f32 for a
/// float32 state, f64 for un-normalised actions).
pub trait Real:
    Copy
    + PartialOrd
    + Into<f64>
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    /// Zero.
    const ZERO: Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Neither NaN nor infinite.
    fn is_finite(self) -> bool;
}

/// [`Real`] for a primitive float, by its inherent methods.
macro_rules! impl_real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const ZERO: $t = 0.0;
            fn sqrt(self) -> $t {
                <$t>::sqrt(self)
            }
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
        }
    )*};
}

impl_real!(f32, f64);

/// The rotation whose first two rows are the Gram–Schmidt of `r6`'s two triples, computed in
/// `T`; `None` when a triple is zero, parallel to the other, or not finite.
pub fn rot6d_to_matrix<T: Real>(r6: &[T]) -> Option<Mat3> {
    let norm = |v: [T; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let a = [r6[0], r6[1], r6[2]];
    let b = [r6[3], r6[4], r6[5]];
    let na = norm(a);
    if !(na > T::ZERO && na.is_finite()) {
        return None;
    }
    let row1 = a.map(|x| x / na);
    let d = row1[0] * b[0] + row1[1] * b[1] + row1[2] * b[2];
    let u = [b[0] - d * row1[0], b[1] - d * row1[1], b[2] - d * row1[2]];
    let nu = norm(u);
    if !(nu > T::ZERO && nu.is_finite()) {
        return None;
    }
    let row2 = u.map(|x| x / nu);
    let row3 = cross(row1, row2);
    Some([
        row1.map(Into::into),
        row2.map(Into::into),
        row3.map(Into::into),
    ])
}

/// The first two rows, row-major: `[R00, R01, R02, R10, R11, R12]`.
pub fn matrix_to_rot6d(m: &Mat3) -> [f64; 6] {
    [m[0][0], m[0][1], m[0][2], m[1][0], m[1][1], m[1][2]]
}

/// `a × b`.
pub fn cross<T: Copy + std::ops::Mul<Output = T> + std::ops::Sub<Output = T>>(
    a: [T; 3],
    b: [T; 3],
) -> [T; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// `a · b`.
pub fn matmul(a: &Mat3, b: &Mat3) -> Mat3 {
    let mut c = [[0.0; 3]; 3];
    for (i, row) in c.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
        }
    }
    c
}

/// `m · v`.
pub fn apply(m: &Mat3, v: [f64; 3]) -> [f64; 3] {
    [0, 1, 2].map(|i| m[i][0] * v[0] + m[i][1] * v[1] + m[i][2] * v[2])
}

/// `mᵀ`.
pub fn transpose(m: &Mat3) -> Mat3 {
    [0, 1, 2].map(|i| [m[0][i], m[1][i], m[2][i]])
}

/// The rotation of `angle` radians about the unit x, y or z axis (`axis` 0, 1, 2).
pub fn axis_rotation(axis: usize, angle: f64) -> Mat3 {
    let (s, c) = angle.sin_cos();
    match axis {
        0 => [[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]],
        1 => [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]],
        _ => [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]],
    }
}

/// scipy `Rotation.from_euler("XYZ", e)` (intrinsic): `Rx(e0)·Ry(e1)·Rz(e2)`.
pub fn euler_xyz_intrinsic_to_matrix(e: [f64; 3]) -> Mat3 {
    matmul(
        &matmul(&axis_rotation(0, e[0]), &axis_rotation(1, e[1])),
        &axis_rotation(2, e[2]),
    )
}

/// scipy `Rotation.from_rotvec(v).as_matrix()`: Rodrigues' formula (series near zero).
pub fn rotvec_to_matrix(v: [f64; 3]) -> Mat3 {
    let theta2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    let theta = theta2.sqrt();
    // sin θ/θ and (1 − cos θ)/θ², by their Taylor series where the quotients lose digits.
    let (a, b) = if theta < 1e-4 {
        (1.0 - theta2 / 6.0, 0.5 - theta2 / 24.0)
    } else {
        (theta.sin() / theta, (1.0 - theta.cos()) / theta2)
    };
    let k = [[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]];
    let k2 = matmul(&k, &k);
    let mut r = IDENTITY;
    for i in 0..3 {
        for j in 0..3 {
            r[i][j] += a * k[i][j] + b * k2[i][j];
        }
    }
    r
}

/// scipy `Rotation.from_matrix(m).as_rotvec()` for a rotation matrix: through the unit
/// quaternion (largest-component branch, so it stays accurate near π), angle in [0, π].
pub fn matrix_to_rotvec(m: &Mat3) -> [f64; 3] {
    let [x, y, z, w] = matrix_to_quat_xyzw(m);
    // q and −q are the same rotation: take w ≥ 0 so the angle is at most π.
    let (x, y, z, w) = if w < 0.0 {
        (-x, -y, -z, -w)
    } else {
        (x, y, z, w)
    };
    let s = (x * x + y * y + z * z).sqrt();
    let angle = 2.0 * s.atan2(w);
    // angle / sin(angle/2) → 2 as the angle → 0.
    let scale = if angle < 1e-6 {
        2.0 + angle * angle / 12.0
    } else {
        angle / s
    };
    [x * scale, y * scale, z * scale]
}

/// The unit quaternion `[x, y, z, w]` of a rotation matrix (Shepperd's method).
pub fn matrix_to_quat_xyzw(m: &Mat3) -> [f64; 4] {
    let tr = m[0][0] + m[1][1] + m[2][2];
    let q = if tr >= m[0][0] && tr >= m[1][1] && tr >= m[2][2] {
        let w = 1.0 + tr;
        [m[2][1] - m[1][2], m[0][2] - m[2][0], m[1][0] - m[0][1], w]
    } else if m[0][0] >= m[1][1] && m[0][0] >= m[2][2] {
        let x = 1.0 + m[0][0] - m[1][1] - m[2][2];
        [x, m[0][1] + m[1][0], m[0][2] + m[2][0], m[2][1] - m[1][2]]
    } else if m[1][1] >= m[2][2] {
        let y = 1.0 + m[1][1] - m[0][0] - m[2][2];
        [m[0][1] + m[1][0], y, m[1][2] + m[2][1], m[0][2] - m[2][0]]
    } else {
        let z = 1.0 + m[2][2] - m[0][0] - m[1][1];
        [m[0][2] + m[2][0], m[1][2] + m[2][1], z, m[1][0] - m[0][1]]
    };
    let n = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    q.map(|c| c / n)
}

/// scipy `Rotation.from_matrix(m).as_matrix()` (scipy 1.15): the rotation nearest `m`, i.e. its
/// orthogonal polar factor (scipy projects through the SVD, `U·Vᵀ`); `None` when `det(m) ≤ 0`
/// or an entry is not finite (scipy refuses a non-positive determinant). Upstream reads every
/// EEF `DEFAULT` (4×4) pose through it, so a non-orthonormal block comes back a rotation.
pub fn nearest_rotation(m: &Mat3) -> Option<Mat3> {
    let det = |a: &Mat3| {
        a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
    };
    let d = det(m);
    if !d.is_finite() || d <= 0.0 || m.iter().flatten().any(|x| !x.is_finite()) {
        return None;
    }
    // Newton's polar iteration X ← (X + X⁻ᵀ)/2: converges quadratically to U·Vᵀ.
    let mut x = *m;
    for _ in 0..100 {
        let dx = det(&x);
        // X⁻ᵀ = cofactor(X) / det(X)
        let cof = |i: usize, j: usize| {
            let (r0, r1) = ((i + 1) % 3, (i + 2) % 3);
            let (c0, c1) = ((j + 1) % 3, (j + 2) % 3);
            x[r0][c0] * x[r1][c1] - x[r0][c1] * x[r1][c0]
        };
        let mut next = x;
        let mut change = 0.0f64;
        for (i, row) in next.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = 0.5 * (x[i][j] + cof(i, j) / dx);
                change = change.max((*v - x[i][j]).abs());
            }
        }
        x = next;
        if change <= 1e-15 {
            break;
        }
    }
    Some(x)
}

/// A rigid transform: rotation then translation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pose {
    /// Rotation.
    pub rotation: Mat3,
    /// Translation.
    pub translation: [f64; 3],
}

impl Pose {
    /// `self · other` as 4×4 homogeneous transforms: `other` expressed in `self`'s frame.
    pub fn compose(&self, other: &Pose) -> Pose {
        let t = apply(&self.rotation, other.translation);
        Pose {
            rotation: matmul(&self.rotation, &other.rotation),
            translation: [0, 1, 2].map(|i| t[i] + self.translation[i]),
        }
    }

    /// The flat row-major 4×4 homogeneous matrix.
    pub fn to_homogeneous(&self) -> [f64; 16] {
        let (r, t) = (&self.rotation, &self.translation);
        [
            r[0][0], r[0][1], r[0][2], t[0], r[1][0], r[1][1], r[1][2], t[1], r[2][0], r[2][1],
            r[2][2], t[2], 0.0, 0.0, 0.0, 1.0,
        ]
    }

    /// `[x, y, z, rot6d…]` (rows).
    pub fn to_xyz_rot6d(&self) -> [f64; 9] {
        let r = matrix_to_rot6d(&self.rotation);
        let t = self.translation;
        [t[0], t[1], t[2], r[0], r[1], r[2], r[3], r[4], r[5]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rotation_is_the_polar_factor() {
        // scipy 1.15.3: Rotation.from_matrix(m).as_matrix() for this m (printed with repr).
        let m = [[0.9, 0.2, -0.1], [-0.15, 1.1, 0.05], [0.1, 0.0, 0.95]];
        let want = [
            [
                0.9789938416939145,
                0.17405004761169618,
                -0.10619622804863178,
            ],
            [
                -0.17128981106382662,
                0.9846111017678685,
                0.03465225679782672,
            ],
            [
                0.11059321204806964,
                -0.015734014167727253,
                0.9937412048652609,
            ],
        ];
        let r = nearest_rotation(&m).unwrap();
        assert!(
            close(
                r.iter().flatten().copied().collect::<Vec<_>>().as_slice(),
                want.iter()
                    .flatten()
                    .copied()
                    .collect::<Vec<_>>()
                    .as_slice(),
                1e-12
            ),
            "{r:?}"
        );
        // An exact rotation is kept; a reflection or a singular matrix is refused, as scipy does.
        let q = rotvec_to_matrix([0.3, -1.2, 2.9]);
        let back = nearest_rotation(&q).unwrap();
        assert!(close(
            back.iter()
                .flatten()
                .copied()
                .collect::<Vec<_>>()
                .as_slice(),
            q.iter().flatten().copied().collect::<Vec<_>>().as_slice(),
            1e-14
        ));
        assert!(nearest_rotation(&[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]]).is_none());
        assert!(nearest_rotation(&[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]).is_none());
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    fn flat(m: &Mat3) -> Vec<f64> {
        m.iter().flatten().copied().collect()
    }

    #[test]
    fn rot6d_of_identity_and_round_trip() {
        assert_eq!(matrix_to_rot6d(&IDENTITY), [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        assert_eq!(
            rot6d_to_matrix(&[1.0f64, 0.0, 0.0, 0.0, 1.0, 0.0]),
            Some(IDENTITY)
        );
        let r = euler_xyz_intrinsic_to_matrix([0.3, -1.1, 2.4]);
        let back = rot6d_to_matrix(&matrix_to_rot6d(&r)).unwrap();
        assert!(close(&flat(&back), &flat(&r), 1e-15), "{back:?} vs {r:?}");
    }

    #[test]
    fn rot6d_is_rows_not_columns() {
        // Rz(90°) = [[0,-1,0],[1,0,0],[0,0,1]]: rows give [0,-1,0, 1,0,0], columns [0,1,0, -1,0,0].
        let rz = axis_rotation(2, std::f64::consts::FRAC_PI_2);
        let r6 = matrix_to_rot6d(&rz);
        assert!(
            close(&r6, &[0.0, -1.0, 0.0, 1.0, 0.0, 0.0], 1e-16),
            "{r6:?}"
        );
        // Read back as rows it is Rz(90°); the column reading would be its transpose.
        let m = rot6d_to_matrix(&r6).unwrap();
        assert!(close(&flat(&m), &flat(&rz), 1e-16));
        assert!(!close(&flat(&m), &flat(&transpose(&rz)), 0.5));
    }

    #[test]
    fn gram_schmidt_orthonormalises_the_rows() {
        // Rows scaled by 2 and 3, the second tilted towards the first.
        let m = rot6d_to_matrix(&[2.0f32, 0.0, 0.0, 1.0, 3.0, 0.0]).unwrap();
        assert_eq!(m, IDENTITY);
        // A right-handed frame: row3 = row1 × row2.
        let m = rot6d_to_matrix(&[0.0f64, 1.0, 0.0, 0.0, 0.0, 1.0]).unwrap();
        assert_eq!(m[2], [1.0, 0.0, 0.0]);
        assert_eq!(rot6d_to_matrix(&[0.0f64, 0.0, 0.0, 0.0, 1.0, 0.0]), None);
        assert_eq!(rot6d_to_matrix(&[1.0f64, 0.0, 0.0, 2.0, 0.0, 0.0]), None);
        assert_eq!(rot6d_to_matrix(&[f64::NAN, 0.0, 0.0, 0.0, 1.0, 0.0]), None);
    }

    #[test]
    fn euler_xyz_is_intrinsic() {
        // Intrinsic XYZ = Rx·Ry·Rz; extrinsic xyz would be Rz·Ry·Rx.
        let h = std::f64::consts::FRAC_PI_2;
        let m = euler_xyz_intrinsic_to_matrix([h, h, 0.0]);
        // Rx(90°)·Ry(90°) = [[0,0,1],[1,0,0],[0,1,0]].
        let want = [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]];
        assert!(close(&flat(&m), &flat(&want), 1e-15), "{m:?}");
        let ext = matmul(&axis_rotation(1, h), &axis_rotation(0, h));
        assert!(!close(&flat(&m), &flat(&ext), 0.5));
    }

    #[test]
    fn rotvec_known_rotations_and_round_trips() {
        let h = std::f64::consts::FRAC_PI_2;
        let m = rotvec_to_matrix([0.0, 0.0, h]);
        assert!(close(&flat(&m), &flat(&axis_rotation(2, h)), 1e-15));
        assert!(close(&matrix_to_rotvec(&m), &[0.0, 0.0, h], 1e-15));
        assert_eq!(rotvec_to_matrix([0.0; 3]), IDENTITY);
        assert_eq!(matrix_to_rotvec(&IDENTITY), [0.0; 3]);
        // Tiny angles (series branch) and angles near π (largest-component branch).
        for v in [
            [1e-9, -2e-9, 3e-9],
            [0.3, -0.2, 0.9],
            [-1.9, 0.4, 2.2],
            [0.0, std::f64::consts::PI - 1e-9, 0.0],
        ] {
            let back = matrix_to_rotvec(&rotvec_to_matrix(v));
            assert!(close(&back, &v, 1e-12), "{v:?} → {back:?}");
        }
        // A rotation by π about x: its rotvec has angle π (either sign is the same rotation).
        let back = matrix_to_rotvec(&axis_rotation(0, std::f64::consts::PI));
        assert!(close(
            &back.map(f64::abs),
            &[std::f64::consts::PI, 0.0, 0.0],
            1e-12
        ));
    }

    #[test]
    fn compose_is_t_ref_times_t_rel() {
        // Reference: Rz(90°) at (0.5, 0, 0); relative: Rz(90°), 1 along the reference's x axis.
        let h = std::f64::consts::FRAC_PI_2;
        let reference = Pose {
            rotation: axis_rotation(2, h),
            translation: [0.5, 0.0, 0.0],
        };
        let rel = Pose {
            rotation: axis_rotation(2, h),
            translation: [1.0, 0.0, 0.0],
        };
        let abs = reference.compose(&rel);
        assert!(close(&abs.translation, &[0.5, 1.0, 0.0], 1e-15));
        assert!(close(
            &flat(&abs.rotation),
            &flat(&axis_rotation(2, 2.0 * h)),
            1e-15
        ));
        // Not commutative: T_rel·T_ref puts the translation elsewhere.
        let other = rel.compose(&reference);
        assert!(close(&other.translation, &[1.0, 0.5, 0.0], 1e-15));
        let identity = Pose {
            rotation: IDENTITY,
            translation: [0.0; 3],
        };
        assert_eq!(reference.compose(&identity), reference);
    }
}
