"""
fastfair's compiled core: framework-free kernels over DLPack arrays.
"""
from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['availability', 'build_info', 'dr_dense_workspace_len', 'dr_gradient', 'dr_lazy_step', 'eg_step', 'fedevg_server_step', 'get_num_threads', 'label_segments', 'normal_segments', 'ons_settle', 'ons_step', 'project_simplex', 'sample_clients', 'set_num_threads', 'sgld_step', 'simplex_qp', 'simplex_qp_batched', 'softmax_regression_sgd', 'softmax_rows', 'softmax_workspace_len', 'superfed_reduce', 'superfed_step', 'weighted_average_lists', 'weighted_average_rows']
def _set_cpu_isa(isa: str) -> str:
    """
    Testing hook: caps the CPU instruction set of the kernels for this process (as FASTFAIR_CPU_ISA does at start-up) and returns the level now in use.
    """
def availability(prob: typing.Any, prob_scalar: typing.SupportsFloat | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex, round: typing.SupportsInt | typing.SupportsIndex, out: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    mask[i] = (u_i < prob_i) with Philox uniforms u keyed by (seed, round).
    """
def build_info() -> dict:
    """
    What this build of fastfair._C contains: CUDA on/off and versions, OpenMP thread count, compiler, pybind11 version.
    """
def dr_dense_workspace_len(num_clients: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    Doubles of device scratch the CUDA dr_gradient needs for K clients.
    """
def dr_gradient(responses: typing.Any, ids: typing.Any, p: typing.Any, sample_prob: typing.SupportsFloat | typing.SupportsIndex, variant: str, out: typing.Any, estimate: typing.Any, workspace: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    AAggFF-D's DR estimate and linearised gradient for all K clients; see fastfair.ops.
    """
def dr_lazy_step(state: typing.Any, ids: typing.Any, responses: typing.Any, sample_prob: typing.SupportsFloat | typing.SupportsIndex, eta: typing.SupportsFloat | typing.SupportsIndex, prior_mass: typing.SupportsFloat | typing.SupportsIndex, variant: str, out: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    AAggFF-D's O(m) lazy round: state[ids] += delta, weights = softmax(-eta * state[ids]).
    """
def eg_step(G: typing.Any, g: typing.Any, ids: typing.Any, values: typing.Any, scale: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], out: typing.Any, lse: typing.Any, workspace: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    G += g (or G[ids] += values), then lse / softmax of scale * G; see fastfair.ops.eg_step.
    """
def fedevg_server_step(x: typing.Any, G: typing.Any, e: typing.Any, w: typing.Any, out: typing.Any, step: typing.SupportsFloat | typing.SupportsIndex, step_vec: typing.Any, noise: typing.SupportsFloat | typing.SupportsIndex, noise_vec: typing.Any, grad_clip: typing.SupportsFloat | typing.SupportsIndex, lo: typing.SupportsFloat | typing.SupportsIndex, hi: typing.SupportsFloat | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex, offset: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, out_name: str) -> None:
    """
    Self-normalised client mixture of energy gradients, then the Langevin step; see fastfair.ops.fedevg_server_step. out_name: what errors call out ('x' in place).
    """
def get_num_threads() -> int:
    """
    The number of OpenMP threads the CPU kernels use.
    """
def label_segments(x: typing.Any, offsets: typing.Any, W: typing.Any, b: typing.Any, scale: typing.Any, shift: typing.Any, y: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    y[r] = argmax_c(b[i, c] + sum_f x[r, f] W[i, f, c]) over the rows of segment i, after x <- x * scale + shift[i] when scale is given; see fastfair.ops.label_segments.
    """
def normal_segments(keys: typing.Any, offsets: typing.Any, out: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    out[offsets[i] + j] = z(keys[i], j): keyed Philox normals per segment; see fastfair.ops.normal_segments.
    """
def ons_settle(H: typing.Any, Hinv: typing.Any, pending_u: typing.Any, pending_c: typing.Any, pending_g: typing.Any, beta: typing.SupportsFloat | typing.SupportsIndex) -> None:
    """
    Folds the pending rank-1 terms of an ONS state into H and Hinv (in place).
    """
def ons_step(H: typing.Any, Hinv: typing.Any, pending_u: typing.Any, pending_c: typing.Any, pending_g: typing.Any, b: typing.Any, p: typing.Any, g: typing.Any, beta: typing.SupportsFloat | typing.SupportsIndex, paper: bool, tol: typing.SupportsFloat | typing.SupportsIndex, max_iter: typing.SupportsInt | typing.SupportsIndex) -> dict:
    """
    One Online Newton Step round on maintained state (in place); returns the certificate. A round that raises leaves the state logically unchanged.
    """
def project_simplex(v: typing.Any, out: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Euclidean projection of each row of v onto the probability simplex; see fastfair.ops.
    """
def sample_clients(num_clients: typing.SupportsInt | typing.SupportsIndex, m: typing.SupportsInt | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex, round: typing.SupportsInt | typing.SupportsIndex, out: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    m distinct client ids out of num_clients, a pure function of (seed, round); see fastfair.ops.sample_clients.
    """
def set_num_threads(num_threads: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Sets the number of OpenMP threads the CPU kernels use.
    """
def sgld_step(x: typing.Any, grad: typing.Any, out: typing.Any, step: typing.SupportsFloat | typing.SupportsIndex, step_vec: typing.Any, noise: typing.SupportsFloat | typing.SupportsIndex, noise_vec: typing.Any, grad_clip: typing.SupportsFloat | typing.SupportsIndex, lo: typing.SupportsFloat | typing.SupportsIndex, hi: typing.SupportsFloat | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex, offset: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, out_name: str) -> None:
    """
    out = clamp(x - step * clip(grad) + noise * z), z Philox normals keyed by (seed, offset); see fastfair.ops.sgld_step. out_name: what errors call out ('x' in place).
    """
def simplex_qp(H: typing.Any, b: typing.Any, warm: typing.Any, out: typing.Any, max_iter: typing.SupportsInt | typing.SupportsIndex) -> dict:
    """
    Exact argmin over the simplex of 1/2 p'Hp - b'p (active set); returns the certificate.
    """
def simplex_qp_batched(H: typing.Any, b: typing.Any, out: typing.Any, kkt: typing.Any, iterations: typing.Any, support: typing.Any, method: typing.SupportsInt | typing.SupportsIndex, max_iter: typing.SupportsInt | typing.SupportsIndex, tol: typing.SupportsFloat | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    B independent simplex QPs: H [B, K, K], b [B, K] -> out [B, K]; see fastfair.ops.
    """
def softmax_regression_sgd(x: typing.Any, y: typing.Any, offsets: typing.Any, keys: typing.Any, clients: typing.Any, steps: typing.Any, params: typing.Any, batch_size: typing.SupportsInt | typing.SupportsIndex, lr: typing.SupportsFloat | typing.SupportsIndex, received_loss: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Local minibatch SGD of multinomial logistic regression for a cohort, in place; see fastfair.ops.softmax_regression_sgd.
    """
def softmax_rows(x: typing.Any, scale: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], out: typing.Any, lse: typing.Any, workspace: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    lse[b] = logsumexp(scale[b] * x[b]) and optionally out[b] = softmax(scale[b] * x[b]); see fastfair.ops.softmax.
    """
def softmax_workspace_len(rows: typing.SupportsInt | typing.SupportsIndex, cols: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    Doubles of device scratch the CUDA softmax needs for a [rows, cols] input.
    """
def superfed_reduce(f: typing.Any, l: typing.Any, g: typing.Any, offsets: typing.Any, twinned: typing.Any, out: typing.Any, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Per row and segment: <f, l>, |f|^2, |l|^2, |f - g|^2; see fastfair.ops.superfed_reduce.
    """
def superfed_step(f: typing.Any, l: typing.Any, g: typing.Any, grad: typing.Any, buf_f: typing.Any, buf_l: typing.Any, lam: typing.Any, lam_next: typing.Any, mixed: typing.Any, prox: typing.Any, orth: typing.Any, active: typing.Any, offsets: typing.Any, twinned: typing.Any, lr: typing.SupportsFloat | typing.SupportsIndex, momentum: typing.SupportsFloat | typing.SupportsIndex, weight_decay: typing.SupportsFloat | typing.SupportsIndex, train_local: bool, stream: typing.SupportsInt | typing.SupportsIndex, mixed_name: str) -> None:
    """
    Fused SuPerFed update of (f, l) and the next mixed model; see fastfair.ops.superfed_step. mixed_name: what errors call mixed (superfed_mix's out).
    """
def weighted_average_lists(updates: collections.abc.Sequence, w: typing.Any, out: typing.Any, mode: str, lr: typing.SupportsFloat | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, names: tuple[str, str, str, bool, bool]) -> None:
    """
    Multi-tensor weighted sum of N lists of L arrays into L outputs; see fastfair.ops. names = (updates, w, out, per_client, per_array) as the caller calls them, for errors.
    """
def weighted_average_rows(X: typing.Any, w: typing.Any, out: typing.Any, mode: str, lr: typing.SupportsFloat | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, names: tuple[str, str, str, bool, bool]) -> None:
    """
    Sum over rows of X [N, ...] weighted by w [N] (float64) into out; see fastfair.ops. names = (X, w, out, per_client, per_array) as the caller calls them, for errors.
    """
