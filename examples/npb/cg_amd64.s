#include "textflag.h"

// CG's sparse matrix-vector product. Each row's sum is one chain of
// additions in the order of its entries, as in cg.go's spmvGo (and NPB),
// so the results are bit-identical to it; the loop is unrolled by four,
// with no bounds checks (the caller checks the matrix once, when it is
// built, and x's length on every call).

// func cgSpmv(y *float64, rowstr *int32, nrows int, colidx *int32, a, x *float64)
TEXT ·cgSpmv(SB), NOSPLIT, $0-48
	MOVQ    y+0(FP), DI
	MOVQ    rowstr+8(FP), SI
	MOVQ    nrows+16(FP), CX
	MOVQ    colidx+24(FP), R8
	MOVQ    a+32(FP), R9
	MOVQ    x+40(FP), R10
	XORQ    BX, BX
	MOVLQSX (SI), AX      // k = rowstr[0]

row:
	CMPQ    BX, CX
	JGE     done
	MOVLQSX 4(SI)(BX*4), DX // hi = rowstr[j+1]
	XORPS   X0, X0
	LEAQ    -3(DX), R11     // four at a time while k+3 < hi
	CMPQ    AX, R11
	JGE     tail

	// The loop starts a cache line of its own, so that its speed does not
	// depend on where the linker puts the function.
	PCALIGN $64

quad:
	MOVLQSX (R8)(AX*4), R12
	MOVLQSX 4(R8)(AX*4), R13
	MOVLQSX 8(R8)(AX*4), R14
	MOVLQSX 12(R8)(AX*4), R15
	MOVSD   (R10)(R12*8), X1
	MULSD   (R9)(AX*8), X1
	ADDSD   X1, X0
	MOVSD   (R10)(R13*8), X2
	MULSD   8(R9)(AX*8), X2
	ADDSD   X2, X0
	MOVSD   (R10)(R14*8), X3
	MULSD   16(R9)(AX*8), X3
	ADDSD   X3, X0
	MOVSD   (R10)(R15*8), X4
	MULSD   24(R9)(AX*8), X4
	ADDSD   X4, X0
	ADDQ    $4, AX
	CMPQ    AX, R11
	JLT     quad

tail:
	CMPQ    AX, DX
	JGE     store
	MOVLQSX (R8)(AX*4), R12
	MOVSD   (R10)(R12*8), X1
	MULSD   (R9)(AX*8), X1
	ADDSD   X1, X0
	INCQ    AX
	JMP     tail

store:
	MOVSD X0, (DI)(BX*8)
	INCQ  BX
	JMP   row

done:
	RET
