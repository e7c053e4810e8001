// Memory in every form the kernels use: DS reads/writes/permutes, MUBUF (offen, idxen, lds,
// cache bits, atomics), global (saddr and 64-bit vaddr), SMEM; MFMA with AGPR and VGPR operands.
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl memory_mfma
.p2align 8
.type memory_mfma,@function
memory_mfma:
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dwordx2 s[8:9], s[0:1], 0x10
  s_waitcnt lgkmcnt(0)
  v_lshlrev_b32_e32 v1, 4, v0
  ds_write_b32 v1, v2
  ds_write_b64 v1, v[2:3] offset:256
  ds_write_b128 v1, v[4:7] offset:512
  ds_write2_b32 v1, v2, v3 offset0:4 offset1:8
  ds_write_b16 v1, v2 offset:2
  s_waitcnt lgkmcnt(0)
  s_barrier
  ds_read_b32 v8, v1
  ds_read_b64 v[10:11], v1 offset:256
  ds_read_b128 v[12:15], v1 offset:65520
  ds_read2_b32 v[16:17], v1 offset0:1 offset1:255
  ds_read_u16_d16_hi v18, v1 offset:6
  ds_bpermute_b32 v19, v1, v2
  ds_permute_b32 v20, v1, v2 offset:4
  ds_swizzle_b32 v21, v1 offset:swizzle(SWAP,16)
  ds_add_u32 v1, v2
  ds_read_b64 a[0:1], v1 offset:8
  buffer_load_dword v22, v1, s[4:7], 0 offen
  buffer_load_dwordx4 v[24:27], v1, s[4:7], s10 offen offset:64
  buffer_load_dwordx2 v[28:29], v1, s[4:7], 0 idxen
  buffer_load_dword v30, off, s[4:7], s11 offset:4095
  buffer_load_dwordx4 a[4:7], v1, s[4:7], 0 offen sc0 sc1 nt
  s_mov_b32 m0, s12
  buffer_load_dword v1, s[4:7], 0 offen lds
  buffer_load_dword v1, s[4:7], 0 offen offset:128 lds
  buffer_store_dword v22, v1, s[4:7], 0 offen nt sc1
  buffer_store_dwordx2 v[28:29], v1, s[4:7], 0 offen offset:8
  buffer_atomic_add_f32 v22, v1, s[4:7], 0 offen
  buffer_atomic_pk_add_f16 v22, v1, s[4:7], 0 offen
  buffer_atomic_add v22, v1, s[4:7], 0 offen sc0
  global_load_dword v31, v1, s[8:9]
  global_load_dwordx4 v[32:35], v1, s[8:9] offset:-4096
  global_load_dwordx2 v[36:37], v[38:39], off offset:16
  global_store_dword v1, v31, s[8:9] offset:4095
  global_store_dwordx2 v[38:39], v[36:37], off
  global_atomic_add_f32 v1, v31, s[8:9]
  global_atomic_pk_add_bf16 v1, v31, s[8:9] offset:32
  global_atomic_cmpswap v40, v1, v[36:37], s[8:9] sc0
  flat_load_dword v41, v[38:39]
  scratch_load_dword v42, off, s13 offset:8
  s_waitcnt vmcnt(0) lgkmcnt(0)
  v_accvgpr_write_b32 a8, v22
  v_accvgpr_read_b32 v43, a8
  v_accvgpr_mov_b32 a9, a8
  v_mfma_f32_32x32x8_bf16 a[16:31], v[10:11], v[28:29], a[16:31]
  v_mfma_f32_32x32x8_bf16 v[48:63], a[0:1], v[28:29], 0
  v_mfma_f32_16x16x16_f16 a[32:35], a[0:1], a[2:3], a[32:35] cbsz:2 abid:1 blgp:3
  v_mfma_f32_16x16x32_fp8_fp8 v[64:67], v[10:11], v[28:29], v[64:67]
  v_mfma_i32_32x32x16_i8 a[48:63], v[10:11], v[28:29], a[48:63]
  v_mfma_f32_4x4x4_16b_f16 a[64:67], v[10:11], v[28:29], a[64:67] blgp:2
  v_mfma_f64_16x16x4_f64 v[68:75], v[10:11], v[28:29], v[68:75]
  v_smfmac_f32_16x16x32_bf16 v[76:79], v[10:11], v[80:83], v84 cbsz:1 abid:2
  s_nop 15
  s_nop 2
  s_endpgm

.rodata
.p2align 6
.amdhsa_kernel memory_mfma
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_group_segment_fixed_size 65536
  .amdhsa_private_segment_fixed_size 16
  .amdhsa_next_free_vgpr 168
  .amdhsa_next_free_sgpr 16
  .amdhsa_accum_offset 88
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: memory_mfma
    .symbol: memory_mfma.kd
    .kernarg_segment_size: 24
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 65536
    .private_segment_fixed_size: 16
    .wavefront_size: 64
    .sgpr_count: 16
    .vgpr_count: 85
    .agpr_count: 68
    .max_flat_workgroup_size: 512
    .args:
      - .name: rsrc
        .offset: 0
        .size: 16
        .value_kind: by_value
      - .name: out
        .offset: 16
        .size: 8
        .value_kind: global_buffer
        .address_space: global
...
.end_amdgpu_metadata
