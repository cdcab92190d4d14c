"""Kernel taxonomy (what each GPU activity computes, and which library it comes from) and the
per-kernel / per-category / per-library time tables.

Two columns per GPU activity, DESIGN.md "kernel categories":
- `category`: what it computes (CATEGORIES).
- `library`: where it comes from (LIBRARIES).

Precedence, for the category of one activity:
1. `gpu_memcpy` / `gpu_memset` events are `memcpy` / `memset` whatever their name.
2. The name, by the first rule in CATEGORY_RULES whose pattern matches (on the demangled name
   with its return type removed, camelCase humps split by `_`, lowered: `tensorTransformGeneric`
   is `tensor_transform_generic`, so `(?<![a-z])` marks where a word starts).
3. The launching op (GPU activity -> launch call by correlation -> the innermost cpu op holding it)
   overrides the name only where the name is generic and the op says more (OP_OVERRIDES): a name
   that says nothing (`other`) takes the op's category; a GEMM-shaped kernel launched by a
   convolution or attention op is what that op computes (MIOpen/CK convolutions are GEMMs); a
   TensorIterator elementwise/reduction kernel launched by a normalization op is `norm`, and one
   launched by `aten::cat`/`pad` a layout `copy`. Names that say what they compute
   (`flash_fwd`, `nccl*`, `softmax`, `topk`, ...) are never overridden: the innermost op can be
   a wrapper (`aten::linear`) or a fallback path and is weaker evidence than the kernel's name.
   Where the trace has no link (CUDA graph replays, GPU-only traces) the name decides alone.
The library comes from the name (LIBRARY_RULES); a name no rule places that a PyTorch `aten::` op
launched is `aten` (PyTorch's own kernels outside `at::native`, such as `softmax_warp_forward`), on
all its rows: a kernel has one library, whether or not the trace links each launch to an op (the
kernels still running when tracing began were launched before it, so nothing links them).
Rules are applied once per distinct name and once per distinct op name; rows combine the two
through their codes and one lookup table.
"""
from __future__ import annotations

import functools
import math
import re

from typing import Iterable

import numpy as np
import pandas as pd

from ..trace.model import Trace

# The category rules, in order: (category, pattern, unless). A name matches a rule when it matches
# `pattern` and not `unless`. Patterns run on the name as words (`_words`: camelCase humps split
# by `_`, lowered), so a short word that could sit inside another one is written after
# `(?<![a-z])`, a word start: `sort` is a word in `DeviceRadixSort` and `radixSortKVInPlace`, not
# in cuDNN's `tensorTransformGeneric`; `pool` not in a `mempool`. Words that other names run
# together are written `_?` between their parts (`nchw_?to_?nhwc`, `cat_?array`). Patterns run on
# the whole demangled name, template arguments included, which is deliberate: cuBLAS helpers such
# as `splitKreduce_kernel<...>`, `dot_kernel<..., cublasDotParams>` or
# `epilogue::impl::globalKernel<..., cublasLtEpilogue_t>` only say they belong to a GEMM there.
#
# Why each pattern is what it is:
# - communication first: NCCL/RCCL names say what they do (`ncclDevKernel_AllReduce_*`), and vLLM's
#   custom all-reduce is `cross_device_reduce_*`.
# - memcpy / memset by name only for kernels that copy or fill: the runtime's own events
#   (`Memcpy DtoH ...`, `Memset (Device)`: anchored at the start) and ROCm's
#   `__amd_rocclr_copyBuffer` / `fillBuffer` blits. Anchored because a Triton compute kernel may
#   end in `_memset` (vLLM's MoE `_combined_routing_memset` computes routing tables): it is a
#   kernel like any other and counts as one.
# - Inductor (`triton_poi_/red_/per_/tem_`) next, because Inductor names a kernel after every op it
#   fused (`triton_poi_fused_convolution_relu_0` is the pointwise epilogue after a convolution, not a
#   convolution): the prefix says the kind of kernel. `poi` is pointwise (elementwise), `red`/`per`
#   are reductions (norm when a normalization was fused in: `triton_red_fused_native_layer_norm_0`,
#   except vector norms), `tem` is a template: a GEMM unless it names attention (flex attention) or
#   a convolution. Pre-2.1 `triton__0d1d2de` names say nothing and stay `other` (library triton).
# - scatter_gather before attention and gemm for kernels whose names borrow their words: writing
#   K/V into a paged cache (`reshape_and_cache_flash_kernel`, `store_kvcache`) is a scatter, not
#   attention; MoE routing (`_combined_routing_*`, the token -> expert tables) and
#   `_finalize_matmul_scatter` (the MoE combine after the expert GEMMs) are scatters, not GEMMs.
# - attention: flash/fmha/sdpa/attention, `attn` (AOTriton's `attn_fwd`), `sage_fwd`/`sage_bwd`
#   (SageAttention), vLLM's `kernel_unified_attention_*`; `flash` but not
#   the `flashinfer::` namespace, whose norm, sampling and activation kernels are not attention.
# - conv before gemm and copy: cuDNN's and MIOpen's convolutions are implicit GEMMs
#   (`implicit_convolve_sgemm`, `sm80_xmma_fprop_implicit_gemm_*`, MIOpen's
#   `igemm_fwd/bwd/wrw_gtc*`, CK's `kernel_batched_gemm_xdlops_bwd_weight`), named by algorithm
#   (`fprop`, `dgrad`, `wgrad`, `winograd`, `im2col`, `scudnn`/`hcudnn` tiles, `cask_cudnn` set-up
#   kernels). `conv` but not `convert`. cuDNN 9's engines live in `*__5x_cudnn` namespaces
#   (`cutlass__5x_cudnn::Kernel<...ReduceSplitK...>`, the split-K reduction of an implicit-GEMM
#   convolution, which would read as a cutlass GEMM): PyTorch calls cuDNN for convolutions
#   (cuDNN attention says `sdpa`, caught above).
# - norm: `norm(?!al)` keeps random `normal_` kernels out; the `unless` keeps vector norms (grad
#   clipping's `reduce_kernel<..., NormTwoOps>`, `linalg_vector_norm`) with the reductions;
#   `bn_fw`/`bn_bw` are cuDNN's batch norm; `moments`/`GammaBeta` layer norm's statistics and
#   weight-gradient kernels; `lp_norm` is the foreach vector norm of grad clipping
#   (`LpNormFunctor`, `lpnorm_cleanup` under `aten::_foreach_norm`), a reduction.
# - sort: sort, top-k and randperm (`DeviceRadixSort*`, `_topk_forward`, `bitonicSort`,
#   `gatherTopK`, `randperm_handle_duplicate_keys_kernel`: randperm sorts random keys, then
#   shuffles the ties), each a word (`tensorTransform` holds no sort).
# - copy (layout): transposes (MIOpen's `batched_transpose_*`, `transpose_NCHW2CNHW_*`, cuDNN's
#   `nchwToNhwcKernel`/`nhwcToNchwKernel`/`transposeBlock_kernel`/`tensorTransformGeneric`/
#   `nchwAddPaddingKernel`/`convertTensor_kernel` around convolutions), concatenation
#   (`CatArrayBatchedCopy*`), padding, permutes (fbgemm's `permute_2D_*`, `permute_pooled_embs`),
#   MIOpen's sub-tensor copies/casts (`SubTensorOp*`).
# - gemm: `(?<!fb)gemm` because fbgemm_gpu's kernels are not GEMMs; `gemv` for cuBLAS
#   matrix-vector kernels; `Cijk_` at a name start is ROCm Tensile / hipBLASLt; `matmul` for Triton
#   user GEMMs (`_matmul_ogs_*`: the MoE GEMM of triton_kernels); `bmm_` for TensorRT-LLM/FlashInfer
#   batched GEMMs on B200 (`bmm_E2m1_E2m1E2m1_Fp32_*`); `cutlass` for CUTLASS tiles (attention and
#   convolutions with cutlass template arguments were taken above).
# - scatter_gather: `(?<!with_)index` because `elementwise_kernel_with_index` is arange writing its
#   own index; `index` (a word: not `reindex`) covers index_select, index_put,
#   `indexing_backward`; `embedding` adds the
#   TorchRec/fbgemm lookups (`split_embedding_*`) but not rotary embeddings (elementwise);
#   `indices` covers fbgemm's `bounds_check_indices`.
# - reduction: reduce, softmax, scans (`DeviceScanKernel`, rocprim scans), arg-max/min, losses
#   (`cunn_ClassNLLCriterion`), pooling (a windowed max/mean), `_sum_bitmatrix_rows` (MoE routing
#   counts), fbgemm's `_get_FP8_qparam` (a row max), the foreach vector norm (`lp_norm`).
# - elementwise: PyTorch's TensorIterator kernels (`elementwise_kernel`, `vectorized_*`,
#   `unrolled_*`) and fused optimizers' foreach kernels (`multi_tensor_apply`); activations
#   (`act_and_mul`, silu/gelu/relu/swiglu), rotary embeddings, (de)quantization, cuDNN's
#   `scalePackedTensor`. Scatter/gather kernels are also `*_elementwise_kernel` templates, which is
#   why this rule comes after scatter_gather.
CATEGORY_RULES: tuple[tuple[str, str, str | None], ...] = (
    ("communication", r"nccl|rccl|cross_device_reduce", None),
    ("memcpy", r"^memcpy|rocclr_copy", None),
    ("memset", r"^memset|rocclr_fill", None),
    ("attention", r"^triton_tem_.*(?:attention|flex)", None),
    ("conv", r"^triton_tem_.*conv(?!ert)", None),
    ("gemm", r"^triton_tem_", None),
    ("norm", r"^triton_(?:red|per)_.*norm(?!al)", r"vector_norm"),
    ("reduction", r"^triton_(?:red|per)_", None),
    ("elementwise", r"^triton_poi_", None),
    ("other", r"^triton__", None),
    ("scatter_gather", r"reshape_and_cache|store_kvcache|_routing_|finalize_matmul_scatter", None),
    ("attention", r"flash(?!_?infer)|fmha|sdpa|attention|attn|sage_(?:fwd|bwd)", None),
    ("conv", r"conv(?!ert)|fprop|dgrad|wgrad|winograd|im2col|[sh]cudnn|cask_cudnn|_5x_cudnn"
             r"|^igemm_(?:fwd|bwd|wrw)|bwd_weight", None),
    ("norm", r"norm(?!al)|bn_fw|bn_bw|moments|gamma_?beta",
     r"norm_?(?:two_?|one_?|zero_?|inf_?)?ops|vector_norm|lp_?norm"),
    ("sort", r"(?<![a-z])(?:sort|top_?k|randperm)|(?:radix|bitonic|merge)_?sort", None),
    ("copy", r"transpose|nchw_?to_?(?:folded_?)?nhwc|nhwc_?to_?nchw|tensor_?transform"
             r"|nchw_?add_?padding|convert_?tensor_kernel|cat_?array"
             r"|(?:constant|reflection|replication)_?pad|permute|sub_?tensor_?op", None),
    ("gemm", r"(?<!fb)gemm|gemv|cublas|nvjet|xmma|^cijk_|matmul|^bmm_|cutlass", None),
    ("scatter_gather", r"(?<![a-z])(?:scatter|gather|indices)|(?<![a-z])(?<!with_)index"
                       r"|(?<!rotary_)embedding", None),
    ("reduction", r"reduce|soft_?max|(?<![a-z])scan|arg_?max|arg_?min|nllcriterion"
                  r"|(?<![a-z])(?:loss|pool)|max_?pool|avg_?pool|bitmatrix|qparam|lp_?norm", None),
    ("elementwise", r"elementwise|multi_tensor_apply|act_and_mul|silu|gelu|relu|swiglu|rotary"
                    r"|quantize|fp8rowwise|scale_?packed_?tensor", None),
)
CATEGORIES = ("gemm", "attention", "conv", "norm", "elementwise", "reduction", "scatter_gather",
              "copy", "sort", "communication", "memcpy", "memset", "other")

# The library rules, in order: (library, pattern). Why:
# - runtime: the CUDA/HIP runtime's own copies and fills (and ROCm's rocclr blits).
# - triton: Inductor's `triton_*`; user Triton kernels (below, last) are bare identifiers.
# - flash_attention: Dao's flash attention as PyTorch vendors it (`pytorch_flash::flash_fwd_*`)
#   or as `flash_attn`; it carries cutlass types, so it comes before cutlass.
# - cudnn before cutlass and cublas: `cutlass__5x_cudnn::Kernel<...>` and `sm80_xmma_fprop_*`
#   are cuDNN's engines; `implicit/explicit_convolve_sgemm`, `convolve_common_engine_*`, winograd,
#   bn_fw/bn_bw and the layout kernels around its convolutions (`nchwToNhwc`, `nhwcToNchw`,
#   `transposeBlock_kernel<...>`/`transposeWarp_kernel<...>` (templates: HPCG has a plain
#   `transposeBlock_kernel` of its own), `genericTranspose_kernel`, `tensorTransformGeneric`,
#   `nchwAddPadding`, `convertTensor_kernel`) are cuDNN's too.
# - cublas: `cublas`/`cublasLt` namespaces and parameters, `nvjet_*` (cuBLAS 12 on Hopper), the
#   arch-prefixed SASS GEMMs (`volta_sgemm_*`, `ampere_sgemm_*`, `sm90_xmma_gemm_*_cublas`), gemv
#   and split-K helpers. (cuBLAS also ships `cutlass::Kernel2<cutlass_80_*>` tiles; their names
#   say cutlass, and so do we.)
# - hipblaslt: Tensile's `Cijk_*` (hipBLASLt and rocBLAS share them).
# - aiter before composable_kernel: AMD's aiter kernels (`_ZN5aiter...`) are built on CK.
# - composable_kernel: `ck::` / `ck_tile::` (mangled `_ZN2ck`, `_ZN7ck_tile`).
# - miopen: MIOpen's solvers (`igemm_*_gtc*`, `naive_conv`), its tensor ops (`SubTensorOp*`) and
#   layout transposes (`batched_transpose_*`, `transpose_NCHW2CNHW_*`).
# - fbgemm: fbgemm_gpu and the TorchRec kernels it ships without the namespace.
# - cub / rocprim: CCCL's and ROCm's device-wide primitives (sort, scan) PyTorch calls.
# - vllm / sglang: those servers' own CUDA/HIP kernels (`vllm::`, `sgl_hip::`).
# - trtllm: TensorRT-LLM's generated kernels (as FlashInfer ships them on B200: `bmm_E2m1_*`,
#   bare names like Triton's, hence before the last rule).
# - aten: PyTorch's native kernels (`at::native::`, `at_cuda_detail::`); kernels PyTorch defines
#   outside that namespace (`(anonymous namespace)::softmax_warp_forward`) are `aten` through the
#   launching op (an `aten::` op launched a kernel no rule places).
# - triton (last): a Triton kernel is named after its Python function, so its name is a bare
#   identifier; C++ kernels show a signature `(...)` or template `<...>` when demangled, or `_Z`
#   when not, and the vendor libraries with bare names (cuBLAS, cuDNN, Tensile, MIOpen) are
#   placed above.
LIBRARY_RULES: tuple[tuple[str, str], ...] = (
    ("runtime", r"^memcpy|^memset|rocclr"),
    ("nccl", r"nccl|rccl"),
    ("triton", r"^triton_"),
    ("flash_attention", r"pytorch_flash|flash_fwd|flash_bwd|flash_attn|flash::"),
    ("cudnn", r"cudnn|xmma_(?:fprop|dgrad|wgrad)|(?:implicit|explicit)_convolve|convolve_common_engine"
              r"|winograd|bn_fw|bn_bw|nchwto(?:folded)?nhwc|nhwctonchw|transpose(?:block|warp)_kernel<"
              r"|generictranspose_kernel|tensortransform|nchwaddpadding|converttensor_kernel"),
    ("cublas", r"cublas|nvjet|gemv2t|gemvx|splitkreduce"
               r"|^(?:maxwell|pascal|volta|turing|ampere|hopper|blackwell|sm\d+)_\w*gemm"),
    ("hipblaslt", r"^cijk_|hipblaslt"),
    ("aiter", r"aiter"),
    ("composable_kernel", r"^_zn2ck|^_zn7ck_tile|\bck::|ck_tile::"),
    ("miopen", r"miopen|^igemm_|naive_conv|subtensorop|batched_transpose_|^transpose_(?:nchw|cnhw)"),
    ("cutlass", r"cutlass"),
    ("fbgemm", r"fbgemm|split_embedding|permute_pooled_embs|bounds_check_indices"),
    ("cub", r"\bcub::|rocprim"),
    ("flashinfer", r"flashinfer::"),
    ("vllm", r"vllm::"),
    ("sglang", r"sgl_hip|sgl_kernel|sglang"),
    ("magma", r"magma"),
    ("trtllm", r"^bmm_|trtllm"),
    ("aten", r"at::native|at_cuda_detail|at::cuda"),
    ("triton", r"^[a-z_][a-z0-9_]*$"),
)
LIBRARIES = tuple(dict.fromkeys(lib for lib, _ in LIBRARY_RULES)) + ("other",)

# The launching op's category (its innermost cpu op, lowered), checked in order. Only ops whose
# kernels compute one thing are listed: wrappers (`aten::to`, `aten::copy_`) say nothing.
OP_RULES: tuple[tuple[str, str], ...] = (
    ("communication", r"record_param_comms|^c10d::|^nccl:|all_?reduce|all_?gather|reduce_scatter"),
    ("attention", r"scaled_dot_product|flash_attention|efficient_attention|_fused_sdp|attention"),
    ("conv", r"conv(?!ert)"),
    ("norm", r"(?:layer|batch|group|instance|rms)_norm"),
    ("gemm", r"^aten::(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_grouped_mm"
             r"|_scaled_grouped_mm|addmv|mv|dot|vdot|_int_mm|einsum)$"),
    ("sort", r"^aten::(?:sort|topk|argsort|msort|kthvalue|median|nanmedian|randperm)$"),
    ("copy", r"^aten::(?:cat|_cat|stack|constant_pad_nd|pad|reflection_pad\dd|replication_pad\dd)$"),
    ("scatter_gather", r"^aten::(?:index|index_select|index_put_|_index_put_impl_|gather|scatter"
                       r"|scatter_|scatter_add_|embedding|embedding_dense_backward|_embedding_bag"
                       r"|embedding_bag|take|masked_select|masked_scatter_)$"),
    ("reduction", r"^aten::(?:sum|mean|max|min|amax|amin|argmax|argmin|prod|var|std|var_mean"
                  r"|linalg_vector_norm|_foreach_norm|_softmax|softmax|_log_softmax|log_softmax|cumsum"
                  r"|logsumexp|nll_loss\w*|max_pool\w*|avg_pool\w*|adaptive_\w*pool\w*)$"),
)

# Which op categories may override which name categories (precedence 3 in the module
# docstring): a name that says nothing takes any; a GEMM-shaped kernel is what a convolution or
# attention op computes with it; a TensorIterator elementwise or reduction kernel is a norm under
# a normalization op, and a layout copy under cat/pad.
OP_OVERRIDES: dict[str, tuple[str, ...]] = {
    "other": tuple(c for c, _ in OP_RULES),
    "gemm": ("conv", "attention"),
    "elementwise": ("norm", "copy"),
    "reduction": ("norm",),
}

# The layout transposes a convolution library runs around a convolution when the tensors' memory
# format is not the one its kernels want (NCHW tensors into NHWC kernels and back): cuDNN's
# `nchwToNhwc`/`nhwcToNchw`/`nchwToFoldedNhwc`, `transposeBlock_kernel`/`transposeWarp_kernel`,
# `genericTranspose_kernel`, `tensorTransformGeneric`; MIOpen's `batched_transpose_*`,
# `transpose_NCHW2CNHW_*`/`transpose_CNHW2NCHW_*`. On the words of a name, as CATEGORY_RULES.
LAYOUT_TRANSPOSE = (r"nchw_?to_?(?:folded_?)?nhwc|nhwc_?to_?nchw|transpose_?(?:block|warp)_kernel"
                    r"|generic_?transpose_kernel|tensor_?transform|batched_transpose_"
                    r"|transpose_(?:nchw|cnhw)")

# Demangled names often open with a return type (`void `, `std::enable_if<...>::type `), which
# would hide a `^` anchor; the rules look at the name with that prefix removed.
_RETURN_TYPE = r"^(?:void|std::enable_if<.*?>::type)\s+"

# Case-insensitive by lowering both sides once (3x faster than re.I on long template names).
_CATEGORY_RES = tuple((c, re.compile(p.lower()), re.compile(u.lower()) if u else None)
                      for c, p, u in CATEGORY_RULES)
_LIBRARY_RES = tuple((lib, re.compile(p)) for lib, p in LIBRARY_RULES)
_OP_RES = tuple((c, re.compile(p)) for c, p in OP_RULES)
_RETURN_TYPE_RE = re.compile(_RETURN_TYPE)
_HUMP_RE = re.compile(r"(?<=[a-z])(?=[A-Z])")  # a camelCase hump: lower then upper case
_LAYOUT_TRANSPOSE_RE = re.compile(LAYOUT_TRANSPOSE)
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
_LIB_INDEX = {lib: i for i, lib in enumerate(LIBRARIES)}
_NO_OP = len(CATEGORIES)  # op code: no op, or an op that says nothing
# _COMBINE[name category, op category] -> category of the row.
_COMBINE = np.array([[_CAT_INDEX[o] if o in OP_OVERRIDES.get(n, ()) else i
                      for o in CATEGORIES] + [i] for i, n in enumerate(CATEGORIES)], dtype=np.int64)


def _first(text: str, rules) -> str | None:
    for value, pattern, *unless in rules:
        if pattern.search(text) and not (unless and unless[0] and unless[0].search(text)):
            return value
    return None


def classify_names(names: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """Category and library of each distinct name, by name alone (run it on unique names)."""
    pairs = [_classify_name(str(n)) for n in names]
    return (np.array([c for c, _ in pairs], dtype=object), np.array([lib for _, lib in pairs], dtype=object))


@functools.lru_cache(maxsize=1 << 16)
def _classify_name(name: str) -> tuple[str, str]:
    """One name's (category, library): a pure function of the name, so remembered for the next
    trace in this process (the ranks of a job, both sides of a diff share most kernel names)."""
    text = _RETURN_TYPE_RE.sub("", name, count=1).lower()
    return _first(_words(name), _CATEGORY_RES) or "other", _first(text, _LIBRARY_RES) or "other"


def _words(name: str) -> str:
    """The name as the category rules read it: return type removed, camelCase humps split by
    `_`, lowered (`void tensorTransformGeneric<...>` -> `tensor_transform_generic<...>`)."""
    start = _RETURN_TYPE_RE.match(name.lower())
    return _HUMP_RE.sub("_", name[start.end():] if start else name).lower()


@functools.lru_cache(maxsize=1 << 16)
def _is_layout_transpose(name: str) -> bool:
    return bool(_LAYOUT_TRANSPOSE_RE.search(_words(name)))


def layout_transposes(names: Iterable[str]) -> np.ndarray:
    """Whether each name is a convolution library's layout transpose (LAYOUT_TRANSPOSE)."""
    return np.array([_is_layout_transpose(str(n)) for n in names], dtype=bool)


def op_categories(ops: Iterable[str]) -> list[str | None]:
    """The category each op name says (OP_RULES; None: the op says nothing)."""
    return [_op_category(str(o).lower()) for o in ops]


@functools.lru_cache(maxsize=1 << 16)
def _op_category(op: str) -> str | None:
    """The category an op's name says (OP rules), remembered like _classify_name."""
    return _first(op.lower(), _OP_RES)


def categorize_names(names: Iterable[str]) -> np.ndarray:
    """Category of each distinct name, by name alone."""
    return classify_names(names)[0]


def _codes(values) -> tuple[np.ndarray, pd.Index]:
    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.cat.remove_unused_categories()
        return series.cat.codes.to_numpy(), series.cat.categories
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    return codes, pd.Index(uniques)


def classify(names, cats=None, ops=None) -> tuple[np.ndarray, np.ndarray]:
    """Category and library of each row (module docstring): `names` a column (categorical or
    not); `cats` the event categories (`gpu_memcpy`/`gpu_memset` rows become memcpy/memset);
    `ops` the launching op's name per row (missing where the trace does not link one)."""
    cat, lib = classify_codes(names, cats, ops)
    return (np.array(CATEGORIES, dtype=object)[cat], np.array(LIBRARIES, dtype=object)[lib])


def classify_codes(names, cats=None, ops=None) -> tuple[np.ndarray, np.ndarray]:
    """`classify` as positions in CATEGORIES and LIBRARIES (no strings per row)."""
    codes, uniques = _codes(names)
    name_cat, name_lib = classify_names(uniques)
    cat_idx = np.array([_CAT_INDEX[c] for c in name_cat] + [_CAT_INDEX["other"]], dtype=np.int64)
    lib_idx = np.array([_LIB_INDEX[x] for x in name_lib] + [_LIB_INDEX["other"]], dtype=np.int64)
    cat, lib = cat_idx[codes], lib_idx[codes]  # code -1 (missing name) -> other
    if ops is not None and len(cat):
        op_codes, op_names = _codes(ops)
        op_text = [str(o).lower() for o in op_names]
        op_cat = np.array([_CAT_INDEX[c] if (c := _op_category(t)) else _NO_OP
                           for t in op_text] + [_NO_OP], dtype=np.int64)
        aten = np.array([t.startswith("aten::") for t in op_text] + [False])
        cat = _COMBINE[cat, op_cat[op_codes]]
        # a name no library rule places is aten on all its rows once an aten:: op launched one
        by_aten = np.zeros(len(uniques) + 1, dtype=bool)
        by_aten[codes[aten[op_codes] & (lib == _LIB_INDEX["other"])]] = True
        by_aten[-1] = False  # code -1: no name
        lib = np.where((lib == _LIB_INDEX["other"]) & by_aten[codes], _LIB_INDEX["aten"], lib)
    if cats is not None:
        event_codes, event_cats = _codes(cats)
        for event_cat, category in (("gpu_memcpy", "memcpy"), ("gpu_memset", "memset")):
            if event_cat in event_cats:
                rows = event_codes == event_cats.get_loc(event_cat)
                cat[rows], lib[rows] = _CAT_INDEX[category], _LIB_INDEX["runtime"]
    return cat, lib


def categorize(names, cats=None, ops=None) -> np.ndarray:
    """Category of each row (`classify`)."""
    return classify(names, cats, ops)[0]


def launching_ops(trace: Trace) -> pd.DataFrame:
    """Per GPU activity (trace.gpu's row order): `op`, the innermost cpu op holding its launch
    call, and `top_op`, the outermost (categoricals; missing where the trace links none), and
    `op_node`, that innermost op's node in the host call tree (-1: none). Built once per trace."""
    return trace.derived("launching_ops", _launching_ops)


def _launching_ops(trace: Trace) -> pd.DataFrame:
    from .links import gpu_launches
    from .tree import host_tree
    links = gpu_launches(trace)
    op_node = np.full(len(links), -1, dtype=np.int64)
    op, top = op_node.copy(), op_node.copy()
    has = links["launch_row"].to_numpy() >= 0
    names = trace.events["name"].cat.categories
    if has.any():
        tree = host_tree(trace)
        if len(tree):
            node = tree.enclosing(*(links[c].to_numpy()[has] for c in
                                    ("rank", "pid", "tid", "launch_ts", "launch_end")))
            op_node[has] = tree.innermost_op(node)
            op = np.where(op_node >= 0, tree.name[np.maximum(op_node, 0)], -1)
            outer = np.where(node >= 0, tree.top_op[np.maximum(node, 0)], -1)
            top[has] = np.where(outer >= 0, tree.name[np.maximum(outer, 0)], -1)
            names = tree.names
    return pd.DataFrame({"op": pd.Categorical.from_codes(op, categories=names),
                         "top_op": pd.Categorical.from_codes(top, categories=names),
                         "op_node": op_node})


KERNEL_COLUMNS = ["name", "category", "library", "count", "total_us", "mean_us", "min_us",
                  "max_us", "pct"]
CATEGORY_COLUMNS = ["category", "library", "count", "total_us", "pct"]
LIBRARY_COLUMNS = ["library", "count", "total_us", "pct"]


def gpu_with_category(trace: Trace) -> pd.DataFrame:
    """GPU activity (trace.gpu's rows) with `category`, `library` and launching `op`/`top_op`;
    built once per trace (the tables and the dominance rule use it)."""
    return trace.derived("gpu_with_category", _gpu_with_category)


def _gpu_with_category(trace: Trace) -> pd.DataFrame:
    gpu = trace.gpu
    ops = launching_ops(trace) if not gpu.empty else pd.DataFrame(
        {"op": pd.Categorical([]), "top_op": pd.Categorical([])})
    category, library = classify_codes(gpu["name"], gpu["cat"], ops["op"])
    return pd.DataFrame(
        {"name": gpu["name"].cat.remove_unused_categories(),
         # categoricals over the fixed lists: the tables group by their codes
         "category": pd.Categorical.from_codes(category, categories=CATEGORIES),
         "library": pd.Categorical.from_codes(library, categories=LIBRARIES),
         "dur": gpu["dur"].to_numpy(),
         # launching ops as categoricals over the tree's names (a code per row, no strings)
         "op": ops["op"].array, "top_op": ops["top_op"].array}, index=gpu.index)


def kernel_table(trace: Trace) -> pd.DataFrame:
    """All GPU activity (kernels, memcpys, memsets) grouped by name (and category and library,
    which launching ops can split), most total time first.

    `pct` is the share of all GPU activity time (sum of durations), in percent.
    """
    g = gpu_with_category(trace)
    if g.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    cat_codes, cat_names = g["category"].cat.codes.to_numpy(np.int64), np.array(CATEGORIES, dtype=object)
    lib_codes, lib_names = g["library"].cat.codes.to_numpy(np.int64), np.array(LIBRARIES, dtype=object)
    n_cat, n_lib = len(cat_names), len(lib_names)
    key = (g["name"].cat.codes.to_numpy().astype(np.int64) * n_cat + cat_codes) * n_lib + lib_codes
    groups = _groups(key, g["dur"].to_numpy())
    names = g["name"].cat.categories
    k = groups["key"]
    out = pd.DataFrame({
        "name": np.array([str(names[i]) for i in k // (n_cat * n_lib)], dtype=object),
        "category": cat_names[(k // n_lib) % n_cat].astype(object),
        "library": lib_names[k % n_lib].astype(object),
        "count": groups["count"], "total_us": groups["sum"],
        "mean_us": groups["sum"] / groups["count"], "min_us": groups["min"], "max_us": groups["max"]})
    total = g["dur"].sum()
    out["pct"] = 100.0 * out["total_us"] / total if total > 0 else 0.0
    out = out.sort_values(["total_us", "name"], ascending=[False, True], kind="stable")
    return out[KERNEL_COLUMNS].reset_index(drop=True)


def _by(trace: Trace, column: str, columns: list[str]) -> pd.DataFrame:
    g = gpu_with_category(trace)
    if g.empty:
        return pd.DataFrame(columns=columns)
    codes = g[column].cat.codes.to_numpy(np.int64)
    values = np.asarray(g[column].cat.categories, dtype=object)
    dur = g["dur"].to_numpy()
    groups = _groups(codes, dur)
    out = pd.DataFrame({column: values[groups["key"]],
                        "count": groups["count"], "total_us": groups["sum"]})
    total = g["dur"].sum()
    out["pct"] = 100.0 * out["total_us"] / total if total > 0 else 0.0
    if "library" in columns and column != "library":  # the library with most of the time
        libs = g["library"].cat.codes.to_numpy(np.int64)
        n_lib = len(LIBRARIES)
        per_pair = np.bincount(codes * n_lib + libs, weights=dur, minlength=len(values) * n_lib)
        best = per_pair.reshape(len(values), n_lib).argmax(axis=1)
        out["library"] = np.array(LIBRARIES, dtype=object)[best[groups["key"]]]
    out = out.sort_values(["total_us", column], ascending=[False, True], kind="stable")
    return out[columns].reset_index(drop=True)


def category_table(trace: Trace) -> pd.DataFrame:
    """GPU activity time per category, most total time first; `pct` in percent of all of it;
    `library` the library with most of the category's time."""
    return _by(trace, "category", CATEGORY_COLUMNS)


def library_table(trace: Trace) -> pd.DataFrame:
    """GPU activity time per library, most total time first; `pct` in percent of all of it."""
    return _by(trace, "library", LIBRARY_COLUMNS)


def _groups(key: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Per distinct key, in order of first appearance: the key, count, exactly rounded sum
    (math.fsum), min and max of values. One stable argsort of the keys does the grouping."""
    small = len(key) and 0 <= key.min() and key.max() < 2 ** 15  # radix sort on small codes
    order = np.argsort(key.astype(np.int16) if small else key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_key[1:] != sorted_key[:-1])))
    bounds = np.append(starts, len(key))
    ordered = values[order]
    as_list = ordered.tolist()
    sums = np.array([math.fsum(as_list[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    appear = np.argsort(order[starts], kind="stable")  # groups by their first row
    return {"key": sorted_key[starts][appear], "count": np.diff(bounds)[appear], "sum": sums[appear],
            "min": np.minimum.reduceat(ordered, starts)[appear],
            "max": np.maximum.reduceat(ordered, starts)[appear]}
