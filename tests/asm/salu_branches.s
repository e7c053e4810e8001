// SALU (SOP1/SOP2/SOPK/SOPC/SOPP), SMEM and every branch flavour, forward and backward.
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl salu_branches
.p2align 8
.type salu_branches,@function
salu_branches:
  s_load_dwordx2 s[2:3], s[0:1], 0x0
  s_load_dwordx4 s[4:7], s[0:1], 0x10
  s_load_dword s8, s[0:1], 0x20 glc
  s_buffer_load_dword s9, s[4:7], 0x4
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s10, 0x12345678
  s_mov_b32 s11, -16
  s_mov_b64 s[12:13], exec
  s_movk_i32 s14, 0x1234
  s_addk_i32 s14, 0x10
  s_cmpk_eq_u32 s14, 0x1244
  s_add_u32 s15, s10, 64
  s_addc_u32 s16, s11, 0
  s_sub_i32 s17, s15, s16
  s_mul_i32 s18, s17, 3
  s_mul_hi_u32 s19, s17, s18
  s_and_b32 s20, s19, 0xffff
  s_or_b64 s[20:21], s[12:13], vcc
  s_xor_b32 s22, s20, m0
  s_lshl_b32 s23, s22, 4
  s_lshr_b32 s24, s23, 2
  s_ashr_i32 s25, s24, 1
  s_bfe_u32 s26, s25, 0x80008
  s_lshl1_add_u32 s27, s26, s25
  s_ff1_i32_b64 s28, s[12:13]
  s_bcnt1_i32_b64 s29, exec
  s_cselect_b32 s30, s28, s29
  s_min_u32 s31, s30, 7
  s_max_i32 s31, s31, -3
  s_not_b32 s32, s31
  s_getpc_b64 s[34:35]
  s_and_saveexec_b64 s[36:37], s[12:13]
  s_mov_b32 m0, s31
  s_movrels_b32 s38, s2
.Lloop:
  s_sub_u32 s8, s8, 1
  s_cmp_lg_u32 s8, 0
  s_cbranch_scc1 .Lloop
  s_cmp_eq_u32 s9, 0
  s_cbranch_scc0 .Lforward
  s_cbranch_vccz .Lforward
  s_cbranch_vccnz .Lforward
  s_cbranch_execz .Lforward
  s_cbranch_execnz .Lloop
  s_branch .Lforward
  s_nop 7
.Lforward:
  s_setprio 3
  s_sleep 1
  s_barrier
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 4), 0x3
  s_getreg_b32 s39, hwreg(HW_REG_MODE)
  s_store_dword s10, s[2:3], 0x8 glc
  s_dcache_wb
  s_memtime s[40:41]
  s_waitcnt vmcnt(3) expcnt(2) lgkmcnt(1)
  s_waitcnt vmcnt(40)
  s_sendmsg sendmsg(MSG_INTERRUPT)
  s_endpgm

.rodata
.p2align 6
.amdhsa_kernel salu_branches
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr 1
  .amdhsa_next_free_sgpr 42
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
