"""The kernel taxonomy's rules, each with its reason: what a GPU activity's name says it computes
(CATEGORY_RULES -> CATEGORIES) and where it comes from (LIBRARY_RULES -> LIBRARIES), what its
launching op says (OP_RULES) and where the op may override the name (OP_OVERRIDES), and which
names are a convolution library's layout transposes (LAYOUT_TRANSPOSE). Data only: analysis/
kernels.py applies them (its docstring gives the precedence) and builds the tables."""
from __future__ import annotations

# The category rules, in order: (category, pattern, unless). A name matches a rule when it matches
# `pattern` and not `unless`. Patterns run on the name as words (kernels.py `_words`: camelCase
# humps split by `_`, lowered), so a short word that could sit inside another one is written after
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
