"""The kernel taxonomy's rules as data (analysis/gpu/kernel_rules.py): every rule names a declared
category or library and compiles, the overrides name categories, and the rules' order decides
what a name is, read here by a first-match loop written in the test over names already in the
rules' word form (lowered, words split by `_`). kernels.py's application of them to real names
is tested in test_kernels.py."""
from __future__ import annotations

import re

import pytest

from goodhart_prof.analysis.gpu.kernel_rules import (CATEGORIES, CATEGORY_RULES, LAYOUT_TRANSPOSE, LIBRARIES,
                                                     LIBRARY_RULES, OP_OVERRIDES, OP_RULES)


def first_category(words: str) -> str:
    for category, pattern, unless in CATEGORY_RULES:
        if re.search(pattern, words) and not (unless and re.search(unless, words)):
            return category
    return "other"


def test_every_rule_names_a_declared_category_or_library_and_compiles():
    assert {c for c, _, _ in CATEGORY_RULES} <= set(CATEGORIES)
    assert {c for c, _ in OP_RULES} <= set(CATEGORIES)
    # "other" is what no library rule places: last, and no rule's
    assert LIBRARIES[-1] == "other" and "other" not in {lib for lib, _ in LIBRARY_RULES}
    for pattern in ([p for _, p, _ in CATEGORY_RULES] + [u for _, _, u in CATEGORY_RULES if u]
                    + [p for _, p in LIBRARY_RULES] + [p for _, p in OP_RULES] + [LAYOUT_TRANSPOSE]):
        re.compile(pattern)
    for name_category, op_categories in OP_OVERRIDES.items():
        assert name_category in CATEGORIES and set(op_categories) <= set(CATEGORIES)
    assert set(OP_OVERRIDES["other"]) == {c for c, _ in OP_RULES}  # a name saying nothing takes any


@pytest.mark.parametrize("words, category", [
    ("triton_poi_fused_convolution_relu_0", "elementwise"),   # inductor's prefix before `conv`
    ("triton_red_fused_native_layer_norm_0", "norm"),
    ("triton_red_fused_linalg_vector_norm_0", "reduction"),   # a vector norm is no normalization
    ("reshape_and_cache_flash_kernel", "scatter_gather"),     # before attention's `flash`
    ("sm80_xmma_fprop_implicit_gemm_bf16", "conv"),           # conv before gemm
    ("convert_tensor_kernel", "copy"),                        # `conv` but not `convert`
    ("normal_kernel", "other"),                               # random normal_: no norm
    ("index_elementwise_kernel", "scatter_gather"),           # before elementwise
    ("elementwise_kernel_with_index", "elementwise"),         # arange writing its own index
    ("ncclDevKernel_AllReduce_Sum".lower(), "communication"),
    ("fbgemm_split_embedding_codegen", "scatter_gather"),     # fbgemm is no GEMM
])
def test_the_rules_order_decides(words, category):
    assert first_category(words) == category


def test_layout_transposes():
    for words in ("nchw_to_nhwc_kernel", "nhwc_to_nchw_kernel", "transpose_block_kernel", "batched_transpose_16x16"):
        assert re.search(LAYOUT_TRANSPOSE, words), words
    for words in ("convert_tensor_kernel", "permute_2d_kernel", "cat_array_batched_copy"):
        assert not re.search(LAYOUT_TRANSPOSE, words), words
