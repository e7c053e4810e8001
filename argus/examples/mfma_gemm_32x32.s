// One wave computes a 32x32 f32 tile C = A * B^T with v_mfma_f32_32x32x8_bf16.
// A and B are row-major bf16 [32 x K] (the "tn" layout), K a positive multiple of 8;
// C is row-major f32 [32 x 32]. Launch: 1 workgroup of 64 work-items.
// Kernel arguments: A (0), B (8), C (16): global pointers; K (24): u32.
//
// MFMA 32x32x8 operand layout (lane l, slot s, register r):
//   A[i][k]: i = l % 32, k = 4 * (l / 32) + s      B likewise with column j = l % 32
//   D[i][j]: j = l % 32, i = 8 * (r / 4) + 4 * (l / 32) + r % 4
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl mfma_gemm_32x32
.p2align 8
.type mfma_gemm_32x32,@function
mfma_gemm_32x32:
  s_load_dwordx4 s[4:7], s[0:1], 0x0           // A, B
  s_load_dwordx2 s[8:9], s[0:1], 0x10          // C
  s_load_dword s10, s[0:1], 0x18               // K
  v_and_b32_e32 v1, 31, v0                     // row of A / column of B and C
  v_lshrrev_b32_e32 v2, 5, v0                  // lane group: which 4 of the 8 k
  .irp acc, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    v_accvgpr_write_b32 a\acc, 0
  .endr
  s_mov_b32 s11, 0                             // k
  s_waitcnt lgkmcnt(0)
  v_mul_lo_u32 v3, v1, s10                     // element offset of A[row][4 * group]
  v_lshl_add_u32 v3, v2, 2, v3
  v_lshlrev_b32_e32 v3, 1, v3                  // in bytes
  s_cmp_eq_u32 s10, 0
  s_cbranch_scc1 .Lstore
.Lk_loop:
  global_load_dwordx2 v[4:5], v3, s[4:5]
  global_load_dwordx2 v[6:7], v3, s[6:7]
  s_waitcnt vmcnt(0)
  v_mfma_f32_32x32x8_bf16 a[0:15], v[4:5], v[6:7], a[0:15]
  v_add_u32_e32 v3, 16, v3                     // 8 bf16 further along k
  s_add_u32 s11, s11, 8
  s_cmp_lt_u32 s11, s10
  s_cbranch_scc1 .Lk_loop
.Lstore:
  s_nop 10                                     // MFMA 32x32x8 result -> VALU read: 11 wait states
  .irp r, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    v_accvgpr_read_b32 v[10 + \r], a\r
  .endr
  v_lshl_add_u32 v8, v2, 7, v1                 // C[4 * group][column] as an element index
  v_lshlrev_b32_e32 v8, 2, v8                  // in bytes; row i adds 128 * i
  .irp r, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    global_store_dword v8, v[10 + \r], s[8:9] offset:128 * (8 * (\r / 4) + \r % 4)
  .endr
  s_endpgm

.rodata
.p2align 6
.amdhsa_kernel mfma_gemm_32x32
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_kernarg_size 28
  .amdhsa_next_free_vgpr 44
  .amdhsa_next_free_sgpr 12
  .amdhsa_accum_offset 28
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: mfma_gemm_32x32
    .symbol: mfma_gemm_32x32.kd
    .kernarg_segment_size: 28
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 12
    .vgpr_count: 26
    .agpr_count: 16
    .max_flat_workgroup_size: 64
    .args:
      - .name: A
        .offset: 0
        .size: 8
        .value_kind: global_buffer
        .address_space: global
        .actual_access: read_only
      - .name: B
        .offset: 8
        .size: 8
        .value_kind: global_buffer
        .address_space: global
        .actual_access: read_only
      - .name: C
        .offset: 16
        .size: 8
        .value_kind: global_buffer
        .address_space: global
        .actual_access: write_only
      - .name: K
        .offset: 24
        .size: 4
        .value_kind: by_value
...
.end_amdgpu_metadata
