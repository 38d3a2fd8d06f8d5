// tests/exercise/test_mma_ladder.c: Criterion suite "mma_fragment" for fragment_cell (09-tensor-cores/mma_ladder.cu):
// where element e of a lane's fragment of A (16 x 8), B (8 x 8) or C (16 x 8) lies in one mma.sync.m16n8k8 product
// with .tf32 inputs. Index arithmetic only, so no GPU is needed: this is the CPU check of stage 09's build exercise
// (region fragment-load-store), which `make stage 9 exercise` runs on any machine, linked with the candidate's
// mma_ladder.cu (compiled with -DLADDER_NO_MAIN) by tools/try.sh. It checks every lane and element of each matrix,
// the region whole: without a GPU its verdict is the exercise's (tools/try.sh reads the line below); on a GPU the
// ladder's own suite and run check the kernels that use the cells.
// whole: fragment-load-store
//
//     make test          (build/tests/exercise/test_mma_ladder, with the repository's own mma_ladder.cu)
#include <criterion/criterion.h>

// 09-tensor-cores/mma_ladder.cu: fragment_cell on the host; matrix 0, 1, 2 for A, B, C
void mma_fragment_cell(int matrix, int lane, int e, int *row, int *col);

typedef struct {
    const char *name;  // "A", "B", "C"
    char element;      // what the PTX ISA calls the fragment's elements: a, b, c
    int rows, cols, elements;
} Matrix;

static const Matrix MATRICES[3] = {{"A", 'a', 16, 8, 4}, {"B", 'b', 8, 8, 2}, {"C", 'c', 16, 8, 4}};

// The PTX ISA's table (common/mma_tf32.cuh), with g = lane / 4 and t = lane % 4:
//     A: a[0] = A[g][t]   a[1] = A[g + 8][t]   a[2] = A[g][t + 4]   a[3] = A[g + 8][t + 4]
//     B: b[0] = B[t][g]   b[1] = B[t + 4][g]
//     C: c[0] = C[g][2t]  c[1] = C[g][2t + 1]  c[2] = C[g + 8][2t]  c[3] = C[g + 8][2t + 1]
// each entry as its row and column: g_row g + t_row t + add_row, and the same for the column
typedef struct {
    int g_row, t_row, add_row, g_col, t_col, add_col;
    const char *says;  // the table's entry, for the failure message
} Entry;

static const Entry TABLE[3][4] = {
    {{1, 0, 0, 0, 1, 0, "A[g][t]"},
     {1, 0, 8, 0, 1, 0, "A[g + 8][t]"},
     {1, 0, 0, 0, 1, 4, "A[g][t + 4]"},
     {1, 0, 8, 0, 1, 4, "A[g + 8][t + 4]"}},
    {{0, 1, 0, 1, 0, 0, "B[t][g]"}, {0, 1, 4, 1, 0, 0, "B[t + 4][g]"}},
    {{1, 0, 0, 0, 2, 0, "C[g][2t]"},
     {1, 0, 0, 0, 2, 1, "C[g][2t + 1]"},
     {1, 0, 8, 0, 2, 0, "C[g + 8][2t]"},
     {1, 0, 8, 0, 2, 1, "C[g + 8][2t + 1]"}},
};

// every (lane, element) pair lands inside the matrix, and every cell of it is held by exactly one pair
static void check_once(int m) {
    const Matrix *x = &MATRICES[m];
    int held[16][8] = {{0}};
    int first_lane[16][8], first_e[16][8];
    int twice = 0, none = 0;  // the first few of each are shown; the counts say the rest
    for (int lane = 0; lane < 32; lane++) {
        for (int e = 0; e < x->elements; e++) {
            int row = -1, col = -1;
            mma_fragment_cell(m, lane, e, &row, &col);
            cr_assert(row >= 0 && row < x->rows && col >= 0 && col < x->cols,
                      "lane %d's %c[%d] is %s[%d][%d]: outside %s, which is %d x %d", lane, x->element, e, x->name,
                      row, col, x->name, x->rows, x->cols);
            if (held[row][col]++ == 0) {
                first_lane[row][col] = lane;
                first_e[row][col] = e;
            } else if (++twice <= 4) {
                cr_expect_fail("%s[%d][%d] is held twice: by lane %d's %c[%d] and lane %d's %c[%d]", x->name, row, col,
                               first_lane[row][col], x->element, first_e[row][col], lane, x->element, e);
            }
        }
    }
    for (int row = 0; row < x->rows; row++)
        for (int col = 0; col < x->cols; col++)
            if (held[row][col] == 0 && ++none <= 4) cr_expect_fail("%s[%d][%d] is held by no lane", x->name, row, col);
    cr_expect(twice == 0 && none == 0,
              "%s: %d (lane, element) pairs land on a cell another pair holds, and %d cells are held by none; the 32 "
              "lanes x %d elements must hold each of its %d x %d cells exactly once",
              x->name, twice, none, x->elements, x->rows, x->cols);
}

// every (lane, element) pair is where the table puts it
static void check_table(int m) {
    const Matrix *x = &MATRICES[m];
    int wrong = 0;
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4;  // the lane's group
        int t = lane % 4;  // its place in the group
        for (int e = 0; e < x->elements; e++) {
            const Entry *want = &TABLE[m][e];
            int want_row = want->g_row * g + want->t_row * t + want->add_row;
            int want_col = want->g_col * g + want->t_col * t + want->add_col;
            int row = -1, col = -1;
            mma_fragment_cell(m, lane, e, &row, &col);
            if (row == want_row && col == want_col) continue;
            if (++wrong <= 4)  // the first few; the count says the rest
                cr_expect_fail("lane %d (g = %d, t = %d): %c[%d] is %s[%d][%d], want %s[%d][%d] (%c[%d] = %s)", lane, g,
                               t, x->element, e, x->name, row, col, x->name, want_row, want_col, x->element, e,
                               want->says);
        }
    }
    cr_expect_eq(wrong, 0, "%d of the %d (lane, element) pairs of %s are not where the table puts them", wrong,
                 32 * x->elements, x->name);
}

Test(mma_fragment, a_each_cell_once) { check_once(0); }
Test(mma_fragment, b_each_cell_once) { check_once(1); }
Test(mma_fragment, c_each_cell_once) { check_once(2); }
Test(mma_fragment, a_as_the_table_says) { check_table(0); }
Test(mma_fragment, b_as_the_table_says) { check_table(1); }
Test(mma_fragment, c_as_the_table_says) { check_table(2); }
