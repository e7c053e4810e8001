// VALU in every encoding: VOP1, VOP2, VOPC, VOP3 (with abs/neg/clamp/omod/op_sel), VOP3P,
// DPP (quad_perm, row shifts, broadcasts, masks) and SDWA; literals and inline float constants.
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl valu
.p2align 8
.type valu,@function
valu:
  v_mov_b32_e32 v1, v0
  v_mov_b32_e32 v2, 0x3fb8aa3b
  v_mov_b32_e32 v3, 0.5
  v_mov_b32_e32 v4, -4.0
  v_mov_b32_e32 v5, 0.15915494
  v_cvt_f32_u32_e32 v6, v0
  v_rcp_f32_e32 v7, v6
  v_exp_f32_e32 v8, v7
  v_readfirstlane_b32 s4, v1
  v_add_u32_e32 v9, v1, v2
  v_sub_u32_e32 v10, 64, v9
  v_add_f32_e32 v11, 1.0, v3
  v_mul_f32_e32 v12, 0x40490fdb, v11
  v_fmac_f32_e32 v12, v11, v3
  v_fmaak_f32 v13, v11, v12, 0x3e800000
  v_fmamk_f32 v14, v11, 0x3e800000, v12
  v_lshlrev_b32_e32 v15, 2, v0
  v_and_b32_e32 v16, 63, v0
  v_mul_u32_u24_e32 v17, 0x108, v16
  v_add_co_u32_e32 v18, vcc, v16, v17
  v_addc_co_u32_e32 v19, vcc, 0, v18, vcc
  v_cndmask_b32_e32 v20, v18, v19, vcc
  v_cmp_gt_u32_e32 vcc, s4, v1
  v_cmp_lt_f32_e64 s[6:7], v3, |v4|
  v_cmp_u_f32_e64 s[8:9], v11, v11
  v_cndmask_b32_e64 v21, v1, v2, s[6:7]
  v_add_f32_e64 v22, -v11, |v12| clamp
  v_mul_f32_e64 v23, -|v12|, s4 mul:2
  v_fma_f32 v24, v11, v12, -v13 div:2
  v_mad_u64_u32 v[26:27], s[10:11], v1, v2, v[26:27]
  v_add3_u32 v28, v1, v2, 16
  v_lshl_add_u32 v29, v1, 4, v2
  v_perm_b32 v30, v1, v2, s4
  v_bfe_u32 v31, v1, 8, 4
  v_max3_f32 v32, v11, v12, 2.0
  v_mul_lo_u32 v33, v1, s4
  v_mul_hi_u32 v34, v1, v2
  v_readlane_b32 s5, v1, 7
  v_writelane_b32 v35, s5, 3
  v_fma_f16 v36, v1, v2, v3 op_sel:[1,0,0,1]
  v_max3_f16 v36, v1, v2, v3 op_sel:[0,1,0,0]
  v_cvt_pkrtz_f16_f32 v37, v11, v12
  v_pk_mul_f32 v[38:39], v[26:27], v[38:39]
  v_pk_fma_f32 v[40:41], v[26:27], v[38:39], v[40:41] op_sel_hi:[0,1,1]
  v_pk_add_f16 v42, v1, v2 op_sel:[1,0] op_sel_hi:[0,1] neg_lo:[1,0] neg_hi:[0,1]
  v_pk_mov_b32 v[44:45], v[26:27], v[38:39] op_sel:[0,1]
  v_mov_b64_e32 v[46:47], v[26:27]
  v_lshl_add_u64 v[48:49], v[26:27], 2, v[46:47]
  v_mov_b32_dpp v50, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
  v_mov_b32_dpp v50, v1 row_shl:1 row_mask:0xf bank_mask:0x5 bound_ctrl:1
  v_add_f32_dpp v51, v11, v12 row_shr:3 row_mask:0xa bank_mask:0xf
  v_mul_f32_dpp v52, v23, v15 row_newbcast:1 row_mask:0xf bank_mask:0xf
  v_max_f32_dpp v53, v11, v12 row_ror:7 row_mask:0xf bank_mask:0xf
  v_add_u32_dpp v54, v1, v2 row_bcast:15 row_mask:0xa bank_mask:0xf
  v_add_u32_dpp v54, v1, v2 row_bcast:31 row_mask:0xc bank_mask:0xf
  v_mov_b32_dpp v55, v1 row_mirror row_mask:0xf bank_mask:0xf
  v_mov_b32_dpp v55, v1 row_half_mirror row_mask:0xf bank_mask:0xf
  v_mov_b32_dpp v55, v1 wave_shr:1 row_mask:0xf bank_mask:0xf
  v_subrev_f32_dpp v56, -v11, |v12| quad_perm:[0,0,0,0] row_mask:0xf bank_mask:0xf
  v_cvt_f32_f16_sdwa v57, v1 dst_sel:DWORD dst_unused:UNUSED_PRESERVE src0_sel:WORD_1
  v_add_u32_sdwa v58, v1, v2 dst_sel:WORD_1 dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:BYTE_3
  v_mul_f32_sdwa v59, -v1, |v2| dst_sel:DWORD dst_unused:UNUSED_PRESERVE src0_sel:DWORD src1_sel:WORD_0
  v_or_b32_sdwa v59, sext(v1), v2 dst_sel:DWORD dst_unused:UNUSED_PRESERVE src0_sel:BYTE_1 src1_sel:DWORD
  v_cmp_eq_u32_sdwa s[2:3], sext(v1), v2 src0_sel:WORD_0 src1_sel:DWORD
  v_cvt_pk_fp8_f32 v60, v11, v12
  v_cvt_pk_f32_fp8_sdwa v[62:63], v60 src0_sel:WORD_1
  v_cvt_f32_i32_e32 v61, v1
  v_nop
  s_set_gpr_idx_on s4, gpr_idx(SRC0,DST)
  v_mov_b32_e32 v2, v1
  s_set_gpr_idx_off
  s_endpgm

.rodata
.p2align 6
.amdhsa_kernel valu
  .amdhsa_next_free_vgpr 64
  .amdhsa_next_free_sgpr 12
  .amdhsa_accum_offset 64
.end_amdhsa_kernel
