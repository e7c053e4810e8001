// Two kernels in one code object, the second with LDS, scratch and all workgroup ids:
// kernel boundaries, descriptors and per-kernel disassembly must not bleed into each other.
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl first
.p2align 8
.type first,@function
first:
  s_load_dword s2, s[0:1], 0x0
  s_waitcnt lgkmcnt(0)
  v_mov_b32_e32 v1, s2
  s_endpgm

.globl second
.p2align 8
.type second,@function
second:
  v_lshlrev_b32_e32 v3, 2, v0
  ds_write_b32 v3, v0
  s_waitcnt lgkmcnt(0)
  s_barrier
  ds_read_b32 v4, v3 offset:4
  s_cmp_eq_u32 s6, 0
  s_cbranch_scc1 .Lskip
  v_add_u32_e32 v4, s7, v4
.Lskip:
  s_endpgm

.rodata
.p2align 6
.amdhsa_kernel first
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_kernarg_size 8
  .amdhsa_next_free_vgpr 2
  .amdhsa_next_free_sgpr 3
  .amdhsa_accum_offset 4
.end_amdhsa_kernel

.p2align 6
.amdhsa_kernel second
  .amdhsa_user_sgpr_dispatch_ptr 1
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_system_sgpr_workgroup_id_y 1
  .amdhsa_system_sgpr_workgroup_id_z 1
  .amdhsa_system_vgpr_workitem_id 2
  .amdhsa_group_segment_fixed_size 1024
  .amdhsa_private_segment_fixed_size 64
  .amdhsa_enable_private_segment 1
  .amdhsa_next_free_vgpr 5
  .amdhsa_next_free_sgpr 10
  .amdhsa_accum_offset 8
.end_amdhsa_kernel
