# scratch: draws 09-tensor-cores/fragment.svg from the fragment layout mma_ladder.cu uses (not committed)
G = ["#fde2e4", "#e2ece9", "#dfe7fd", "#fff1c1", "#e8dff5", "#d7f2e3", "#fce1c8", "#dbeefc"]
out = []
W, H = 1000, 790
def text(x, y, s, size=12, anchor="middle", weight="normal", fill="#222"):
    out.append(f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" fill="{fill}">{s}</text>')
def cell(x, y, w, h, fill, lane, reg):
    out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" stroke="#999" stroke-width="0.6"/>')
    text(x + w / 2, y + h / 2 + 1, f"T{lane}", 10)
    text(x + w / 2, y + h / 2 + 10, reg, 8, fill="#555")
cw, ch = 34, 24
def grid(x0, y0, rows, cols, who, name, sub):
    text(x0 + cols * cw / 2, y0 - 24, name, 14, weight="bold")
    text(x0 + cols * cw / 2, y0 - 8, sub, 11, fill="#555")
    for r in range(rows):
        text(x0 - 8, y0 + r * ch + ch / 2 + 4, r, 9, anchor="end", fill="#777")
        for c in range(cols):
            lane, reg = who(r, c)
            cell(x0 + c * cw, y0 + r * ch, cw, ch, G[lane // 4], lane, reg)
    for c in range(cols):
        text(x0 + c * cw + cw / 2, y0 + rows * ch + 12, c, 9, fill="#777")
def a_owner(r, c):  # a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] = A[g+8][t+4]
    g, t = r % 8, c % 4
    return 4 * g + t, f"a{(r >= 8) + 2 * (c >= 4)}"
def b_owner(r, c):  # b[0] = B[t][g], b[1] = B[t+4][g]
    return 4 * c + r % 4, f"b{int(r >= 4)}"
def c_owner(r, c):  # c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1]
    return 4 * (r % 8) + c // 2, f"c{2 * (r >= 8) + c % 2}"
out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">')
out.append("  <title>Stage 09: which lane of a warp holds which element of mma.m16n8k8 (tf32)</title>")
out.append("  <!-- The fragment layout of mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 as 09-tensor-cores/mma_ladder.cu loads and stores it (multiply_slice, the epilogue of gemm_mma_kernel): lane = 4 g + t. -->")
out.append(f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>')
text(W / 2, 28, "One mma.sync.m16n8k8 (tf32): C (16 x 8) += A (16 x 8) · B (8 x 8), one warp; T5 = lane 5, a1 = its register a[1]", 15, weight="bold")
text(W / 2, 48, "lane = 4 g + t: g = lane / 4 picks the row (A, C) or column (B), t = lane % 4 the place in it; a colour is one g", 12, fill="#444")
grid(60, 370, 16, 8, a_owner, "A: 16 x 8, row-major", "a[0..3]: rows g, g + 8; columns t, t + 4")
grid(380, 90, 8, 8, b_owner, "B: 8 x 8 (k x n)", "b[0..1]: rows t, t + 4; column g")
grid(380, 370, 16, 8, c_owner, "C: 16 x 8, fp32", "c[0..3]: rows g, g + 8; columns 2t, 2t + 1")
text(205, 180, "C sits below B and right of A:", 12, fill="#444")
text(205, 198, "C[i][j] = sum over k of A[i][k] B[k][j]", 12, fill="#444")
# the block's tile and its warps
x0, y0, s = 720, 130, 7
text(x0 + 16 * s, y0 - 40, "A block's 32 x 16 tile of out", 14, weight="bold")
text(x0 + 16 * s, y0 - 24, "4 warps, 2 x 2; each owns a 16 x 8 corner", 11, fill="#555")
text(x0 + 16 * s, y0 - 10, "= one C fragment (MMA_TILE_M x MMA_TILE_N)", 11, fill="#555")
for w in range(4):
    wr, wc = w // 2, w % 2
    out.append(f'<rect x="{x0 + wc * 8 * s * 2}" y="{y0 + wr * 16 * s}" width="{8 * s * 2}" height="{16 * s}" fill="{G[2 * w]}" stroke="#555"/>')
    text(x0 + wc * 16 * s + 8 * s, y0 + wr * 16 * s + 8 * s + 4, f"warp {w}", 12)
text(x0 + 16 * s, y0 + 32 * s + 24, "per slice of 64 along K: 8 steps of k = 8,", 11, fill="#444")
text(x0 + 16 * s, y0 + 32 * s + 40, "each one mma.sync a warp (three for 3xTF32)", 11, fill="#444")
# shared memory rows
y1 = y0 + 32 * s + 90
text(x0 + 120, y1, "Shared rows are padded:", 13, weight="bold")
for i, line in enumerate(["in slice: 32 rows of 64 + 4 floats", "bank of A[g][t] = (68 g + t) mod 32", "= 4 g + t: 32 lanes, 32 banks",
                          "W slice: 64 rows of 16 + 8 floats", "bank of B[t][g] = (24 t + g) mod 32:", "32 lanes, 32 banks"]):
    text(x0 + 120, y1 + 20 + 16 * i, line, 11, fill="#444")
out.append("</svg>")
open("09-tensor-cores/fragment.svg", "w").write("\n".join(out) + "\n")
