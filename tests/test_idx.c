// tests/test_idx.c: Criterion suite "idx" for the IDX reader and mnist_load (common/idx.c).
//
// Every test writes its own small IDX fixtures (plain and gzip) into a fresh mkdtemp directory, so
// nothing outside the test is needed; the one test on the real MNIST set skips itself when data/mnist
// is absent (run from the repository root after `make data`). Built into build/tests/test_cpu by
// `make test`; run alone with build/tests/test_cpu --filter 'idx/*'.
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"
#include "trainer.h"

// ----------------------------------------------------------------------------
// fixtures: a temp directory per test, IDX files written byte by byte

static char tmp_dir[256];
static char err[512];

static void make_tmp_dir(void) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_idx.XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_dir), "mkdtemp failed");
    err[0] = '\0';
}

static void remove_tmp_dir(void) {
    DIR *dir = opendir(tmp_dir);
    if (!dir) return;
    struct dirent *entry;
    char path[512];
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        snprintf(path, sizeof(path), "%s/%s", tmp_dir, entry->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    closedir(dir);
    rmdir(tmp_dir);
}

TestSuite(idx, .init = make_tmp_dir, .fini = remove_tmp_dir);

static const char *tmp_path(const char *name) {
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    return path;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

// Writes bytes to dir/name, gzip-compressed when gz (the name should then end in .gz).
static void write_bytes(const char *name, const uint8_t *bytes, size_t len, int gz) {
    const char *path = tmp_path(name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        cr_assert_not_null(f, "cannot write %s", path);
        if (len > 0) cr_assert_eq(gzwrite(f, bytes, (unsigned)len), (int)len);
        cr_assert_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f, "cannot write %s", path);
        cr_assert_eq(fwrite(bytes, 1, len, f), len);
        cr_assert_eq(fclose(f), 0);
    }
}

// An image file's bytes: header (magic, count, rows, cols) then pixel i = (seed + 7 i) % 256,
// truncated or padded by body_delta bytes. Caller frees.
static uint8_t *image_bytes(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols, int body_delta,
                            unsigned seed, size_t *len) {
    size_t body = (size_t)count * rows * cols + (size_t)(int64_t)body_delta;
    uint8_t *bytes = malloc(16 + body);
    cr_assert_not_null(bytes);
    put_be32(bytes, magic);
    put_be32(bytes + 4, count);
    put_be32(bytes + 8, rows);
    put_be32(bytes + 12, cols);
    for (size_t i = 0; i < body; i++) bytes[16 + i] = (uint8_t)((seed + 7 * i) % 256);
    *len = 16 + body;
    return bytes;
}

static void write_images(const char *name, uint32_t count, uint32_t rows, uint32_t cols, int gz) {
    size_t len;
    uint8_t *bytes = image_bytes(0x803, count, rows, cols, 0, 3, &len);
    write_bytes(name, bytes, len, gz);
    free(bytes);
}

// A label file with label i = i % 10, except that labels[bad_index] = bad_value when bad_index >= 0.
static void write_labels(const char *name, uint32_t count, int bad_index, uint8_t bad_value, int gz) {
    uint8_t *bytes = malloc(8 + count);
    cr_assert_not_null(bytes);
    put_be32(bytes, 0x801);
    put_be32(bytes + 4, count);
    for (uint32_t i = 0; i < count; i++) bytes[8 + i] = (uint8_t)(i % 10);
    if (bad_index >= 0) bytes[8 + bad_index] = bad_value;
    write_bytes(name, bytes, 8 + count, gz);
    free(bytes);
}

// A complete MNIST-shaped set in tmp_dir: n_train and n_test 28x28 images with matching labels.
static void write_mnist_set(uint32_t n_train, uint32_t n_test) {
    write_images("train-images-idx3-ubyte", n_train, 28, 28, 0);
    write_labels("train-labels-idx1-ubyte", n_train, -1, 0, 0);
    write_images("t10k-images-idx3-ubyte.gz", n_test, 28, 28, 1);
    write_labels("t10k-labels-idx1-ubyte.gz", n_test, -1, 0, 1);
}

// Every failure: -1, one non-empty line in err that mentions `word`.
static void assert_error(int status, const char *word) {
    cr_assert_eq(status, -1, "expected failure, got %d", status);
    cr_assert_gt(strlen(err), 0, "err is empty");
    cr_assert_null(strchr(err, '\n'), "err is not one line: %s", err);
    cr_assert_not_null(strstr(err, word), "err does not mention '%s': %s", word, err);
}

// ----------------------------------------------------------------------------
// good files

Test(idx, reads_images_exactly) {
    write_images("images", 5, 3, 4, 0);
    IdxImages images;
    cr_assert_eq(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(images.count, 5);
    cr_assert_eq(images.rows, 3);
    cr_assert_eq(images.cols, 4);
    for (int i = 0; i < 5 * 3 * 4; i++) cr_assert_eq(images.pixels[i], (uint8_t)((3 + 7 * i) % 256), "pixel %d", i);
    idx_free_images(&images);
    cr_assert_null(images.pixels);
}

Test(idx, reads_labels_exactly) {
    write_labels("labels", 23, 4, 7, 0);
    IdxLabels labels;
    cr_assert_eq(idx_read_labels(tmp_path("labels"), &labels, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(labels.count, 23);
    for (int i = 0; i < 23; i++) cr_assert_eq(labels.labels[i], i == 4 ? 7 : i % 10, "label %d", i);
    idx_free_labels(&labels);
    cr_assert_null(labels.labels);
}

Test(idx, gzip_equals_plain) {
    write_images("plain", 9, 28, 28, 0);
    write_images("packed.gz", 9, 28, 28, 1);
    IdxImages plain, packed;
    cr_assert_eq(idx_read_images(tmp_path("plain"), &plain, err, sizeof(err)), 0, "%s", err);
    // the reader is given the name without .gz and finds the compressed file
    cr_assert_eq(idx_read_images(tmp_path("packed"), &packed, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(packed.count, plain.count);
    cr_assert_eq(packed.rows, plain.rows);
    cr_assert_eq(packed.cols, plain.cols);
    cr_assert_eq(memcmp(packed.pixels, plain.pixels, (size_t)9 * 28 * 28), 0);
    idx_free_images(&plain);
    idx_free_images(&packed);

    write_labels("labels.gz", 11, -1, 0, 1);
    IdxLabels labels;
    cr_assert_eq(idx_read_labels(tmp_path("labels"), &labels, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(labels.count, 11);
    for (int i = 0; i < 11; i++) cr_assert_eq(labels.labels[i], i % 10);
    idx_free_labels(&labels);
}

Test(idx, mnist_load_scales_pixels) {
    write_mnist_set(6, 4);
    MnistSet set;
    cr_assert_eq(mnist_load(tmp_dir, &set, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(set.n_train, 6);
    cr_assert_eq(set.n_test, 4);
    for (int i = 0; i < 6 * 784; i++) {
        uint8_t p = (uint8_t)((3 + 7 * i) % 256);
        cr_assert_eq(set.train_pixels[i], p, "train pixel %d", i);  // the bytes are kept for the GPU trainers
        cr_assert_eq(set.train_images[i], (float)p / 255.0f, "train pixel %d", i);
    }
    for (int i = 0; i < 4 * 784; i++) {
        cr_assert_eq(set.test_pixels[i], (uint8_t)((3 + 7 * i) % 256), "test pixel %d", i);
        cr_assert_eq(set.test_images[i], (float)(uint8_t)((3 + 7 * i) % 256) / 255.0f);
    }
    for (int i = 0; i < 6; i++) cr_assert_eq(set.train_labels[i], i % 10);
    for (int i = 0; i < 4; i++) cr_assert_eq(set.test_labels[i], i % 10);
    mnist_free(&set);
    cr_assert_null(set.train_images);
    cr_assert_null(set.train_pixels);
}

// The GPU trainers (05-07) scale the bytes on the device with mnist_pixel_value, the loader's expression:
// it must be the correctly rounded quotient p / 255 (what an IEEE float division gives on either side,
// and what PyTorch's x.float() / 255 gives), for every byte.
Test(idx, pixel_value_is_the_correctly_rounded_quotient) {
    for (int p = 0; p < 256; p++) {
        float value = mnist_pixel_value((uint8_t)p);
        cr_assert_eq(value, (float)p / 255.0f, "pixel %d", p);
        double exact = p / 255.0, error = fabs((double)value - exact);
        cr_assert(error <= fabs((double)nextafterf(value, 2.0f) - exact) &&
                      error <= fabs((double)nextafterf(value, -1.0f) - exact),
                  "pixel %d: %.9g is not the float nearest %.17g", p, value, exact);
    }
    cr_assert_eq(mnist_pixel_value(0), 0.0f);
    cr_assert_eq(mnist_pixel_value(255), 1.0f);
}

// ----------------------------------------------------------------------------
// corrupt files: each fails with one line that names the problem

Test(idx, missing_file_says_make_data) {
    IdxImages images;
    assert_error(idx_read_images(tmp_path("nothing-here"), &images, err, sizeof(err)), "make data");
    cr_assert_not_null(strstr(err, "nothing-here"), "err does not name the file: %s", err);
    cr_assert_null(images.pixels);
    MnistSet set;
    assert_error(mnist_load(tmp_dir, &set, err, sizeof(err)), "make data");
    cr_assert_not_null(strstr(err, "train-images-idx3-ubyte"), "%s", err);
    cr_assert_null(set.train_images);
}

Test(idx, wrong_magic) {
    size_t len;
    uint8_t *bytes = image_bytes(0x804, 2, 28, 28, 0, 0, &len);
    write_bytes("images", bytes, len, 0);
    free(bytes);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "magic");
    cr_assert_not_null(strstr(err, "images"), "%s", err);

    // a labels file handed to the image reader, and an image file to the label reader
    write_labels("labels", 4, -1, 0, 0);
    assert_error(idx_read_images(tmp_path("labels"), &images, err, sizeof(err)), "magic");
    IdxLabels labels;
    assert_error(idx_read_labels(tmp_path("images"), &labels, err, sizeof(err)), "magic");
    cr_assert_null(labels.labels);
}

Test(idx, truncated_header) {
    size_t len;
    uint8_t *bytes = image_bytes(0x803, 2, 28, 28, 0, 0, &len);
    write_bytes("images", bytes, 10, 0);      // magic, count and half of rows
    write_bytes("images2.gz", bytes, 10, 1);  // the same, compressed
    write_bytes("empty", bytes, 0, 0);
    free(bytes);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "truncated header");
    assert_error(idx_read_images(tmp_path("images2"), &images, err, sizeof(err)), "truncated header");
    assert_error(idx_read_images(tmp_path("empty"), &images, err, sizeof(err)), "truncated header");
    uint8_t short_labels[6] = {0, 0, 8, 1, 0, 0};
    write_bytes("labels", short_labels, sizeof(short_labels), 0);
    IdxLabels labels;
    assert_error(idx_read_labels(tmp_path("labels"), &labels, err, sizeof(err)), "truncated header");
}

Test(idx, truncated_body) {
    size_t len;
    uint8_t *bytes = image_bytes(0x803, 3, 28, 28, -1, 0, &len);  // one pixel short
    write_bytes("images", bytes, len, 0);
    write_bytes("images2.gz", bytes, len, 1);
    free(bytes);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "truncated");
    cr_assert_not_null(strstr(err, "2352"), "err does not give the expected size: %s", err);
    assert_error(idx_read_images(tmp_path("images2"), &images, err, sizeof(err)), "truncated");
    cr_assert_null(images.pixels);
}

Test(idx, truncated_gzip_stream) {
    // a valid gzip file cut in half: the reader must see the end of the data, not garbage
    write_images("full.gz", 50, 28, 28, 1);
    FILE *f = fopen(tmp_path("full.gz"), "rb");
    cr_assert_not_null(f);
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    cr_assert_gt(n, 100);
    write_bytes("cut.gz", buf, n / 2, 0);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("cut"), &images, err, sizeof(err)), "truncated");
}

Test(idx, trailing_bytes_rejected) {
    size_t len;
    uint8_t *bytes = image_bytes(0x803, 3, 28, 28, 5, 0, &len);  // five bytes too many
    write_bytes("images", bytes, len, 0);
    free(bytes);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "after");
}

Test(idx, zero_items) {
    size_t len;
    uint8_t *bytes = image_bytes(0x803, 0, 28, 28, 0, 0, &len);
    write_bytes("images", bytes, len, 0);
    free(bytes);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "zero");
    write_labels("labels", 0, -1, 0, 0);
    IdxLabels labels;
    assert_error(idx_read_labels(tmp_path("labels"), &labels, err, sizeof(err)), "zero");
}

Test(idx, absurd_dims) {
    // headers only: the sizes must be rejected before any body is read
    const uint32_t cases[][3] = {{1, 100000, 28}, {1, 28, 100000}, {1, 0, 28}, {1, 28, 0}, {20000000, 28, 28}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint8_t header[16];
        put_be32(header, 0x803);
        put_be32(header + 4, cases[c][0]);
        put_be32(header + 8, cases[c][1]);
        put_be32(header + 12, cases[c][2]);
        write_bytes("images", header, sizeof(header), 0);
        IdxImages images;
        assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "absurd");
    }
    uint8_t header[8];
    put_be32(header, 0x801);
    put_be32(header + 4, 0xFFFFFFFFu);
    write_bytes("labels", header, sizeof(header), 0);
    IdxLabels labels;
    assert_error(idx_read_labels(tmp_path("labels"), &labels, err, sizeof(err)), "absurd");
}

Test(idx, corrupt_gzip_data) {
    // flip bytes inside the compressed stream: zlib must report an error, never return garbage
    write_images("full.gz", 20, 28, 28, 1);
    FILE *f = fopen(tmp_path("full.gz"), "rb");
    cr_assert_not_null(f);
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    for (size_t i = n / 3; i < n / 3 + 8; i++) buf[i] ^= 0x5A;
    write_bytes("bad.gz", buf, n, 0);
    IdxImages images;
    int status = idx_read_images(tmp_path("bad"), &images, err, sizeof(err));
    cr_assert_eq(status, -1, "a corrupt gzip stream was accepted");
    cr_assert_gt(strlen(err), 0);
    cr_assert_null(strchr(err, '\n'), "%s", err);
    cr_assert_not_null(strstr(err, tmp_path("bad.gz")), "err does not name the file: %s", err);
}

Test(idx, body_larger_than_first_buffer) {
    // 5000 images of 28x28 (3.9 MB): the body buffer starts at 1 MiB and grows while bytes arrive
    write_images("big", 5000, 28, 28, 0);
    write_images("big2.gz", 5000, 28, 28, 1);
    IdxImages plain, packed;
    cr_assert_eq(idx_read_images(tmp_path("big"), &plain, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(idx_read_images(tmp_path("big2"), &packed, err, sizeof(err)), 0, "%s", err);
    size_t len = (size_t)5000 * 28 * 28;
    for (size_t i = 0; i < len; i++) cr_assert_eq(plain.pixels[i], (uint8_t)((3 + 7 * i) % 256), "pixel %zu", i);
    cr_assert_eq(memcmp(plain.pixels, packed.pixels, len), 0);
    idx_free_images(&plain);
    idx_free_images(&packed);

    // and one byte short of that, or one byte over: still caught after the buffer grew
    size_t n;
    uint8_t *bytes = image_bytes(0x803, 5000, 28, 28, -1, 3, &n);
    write_bytes("short", bytes, n, 0);
    free(bytes);
    assert_error(idx_read_images(tmp_path("short"), &plain, err, sizeof(err)), "truncated");
    cr_assert_not_null(strstr(err, "3919999"), "%s", err);
    bytes = image_bytes(0x803, 5000, 28, 28, 1, 3, &n);
    write_bytes("long", bytes, n, 0);
    free(bytes);
    assert_error(idx_read_images(tmp_path("long"), &plain, err, sizeof(err)), "after");
}

Test(idx, huge_promise_in_a_short_file) {
    // a header that promises 10,000,000 images of 4096x4096 (168 TB) in a 20-byte file is a truncated
    // file, found without first asking for 168 TB of memory
    size_t n;
    uint8_t *bytes = image_bytes(0x803, 1, 2, 2, 0, 0, &n);
    put_be32(bytes + 4, 10000000);
    put_be32(bytes + 8, 4096);
    put_be32(bytes + 12, 4096);
    write_bytes("images", bytes, n, 0);
    free(bytes);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "truncated");
    cr_assert_not_null(strstr(err, "file has 4"), "%s", err);
    cr_assert_null(images.pixels);
}

Test(idx, messages_stay_one_line) {
    // a path with a newline in it still gives a one-line message
    assert_error(idx_read_images(tmp_path("no\nsuch"), &(IdxImages){0}, err, sizeof(err)), "missing");
    cr_assert_not_null(strstr(err, "no?such"), "%s", err);
    write_bytes("bad\tname", (const uint8_t *)"garbage!", 8, 0);
    assert_error(idx_read_labels(tmp_path("bad\tname"), &(IdxLabels){0}, err, sizeof(err)), "bad magic");
    cr_assert_not_null(strstr(err, "bad?name"), "%s", err);
}

// ----------------------------------------------------------------------------
// compressed streams are read to their end and verified: the gzip trailer's CRC-32 and
// length, nothing after the stream

// The bytes of a gzip file holding n_images 28x28 images (pixel i = (3 + 7 i) % 256). Caller frees.
static uint8_t *gzip_image_file(uint32_t n_images, size_t *len) {
    write_images("source.gz", n_images, 28, 28, 1);
    FILE *f = fopen(tmp_path("source.gz"), "rb");
    cr_assert_not_null(f);
    uint8_t *buf = malloc(1 << 20);
    cr_assert_not_null(buf);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    unlink(tmp_path("source.gz"));
    cr_assert_gt(*len, 30);
    return buf;
}

// Reads name as images: -1 with one line that mentions word, or (for a damaged stream that zlib can
// decode) never pixels other than the original ones.
static void assert_refused(const char *name, const char *word) {
    IdxImages images;
    int status = idx_read_images(tmp_path(name), &images, err, sizeof(err));
    cr_assert_eq(status, -1, "%s was accepted", name);
    cr_assert_null(strchr(err, '\n'), "%s", err);
    cr_assert_not_null(strstr(err, word), "%s: err does not mention '%s': %s", name, word, err);
    cr_assert_null(images.pixels);
}

Test(idx, gzip_trailer_cut_off) {
    size_t n;
    uint8_t *gz = gzip_image_file(40, &n);
    write_bytes("no-trailer.gz", gz, n - 8, 0);   // the whole trailer (CRC-32 and length) missing
    write_bytes("no-length.gz", gz, n - 4, 0);    // the length missing
    write_bytes("half-trailer.gz", gz, n - 2, 0);
    assert_refused("no-trailer", "gzip");
    assert_refused("no-length", "gzip");
    assert_refused("half-trailer", "gzip");
    // cut, and one payload byte flipped: the damaged pixels must never be trained on
    gz[n / 2] ^= 0x10;
    write_bytes("cut-and-flipped.gz", gz, n - 8, 0);
    assert_refused("cut-and-flipped", "gzip");
    free(gz);
}

Test(idx, gzip_checksum_and_length_verified) {
    size_t n;
    uint8_t *gz = gzip_image_file(40, &n);
    gz[n - 8] ^= 0x01;  // the CRC-32 no longer matches the data
    write_bytes("bad-crc.gz", gz, n, 0);
    assert_refused("bad-crc", "corrupt gzip data");
    gz[n - 8] ^= 0x01;
    gz[n - 3] ^= 0x01;  // the length field no longer matches
    write_bytes("bad-length.gz", gz, n, 0);
    assert_refused("bad-length", "gzip");
    free(gz);
}

Test(idx, gzip_every_flipped_byte_refused_or_harmless) {
    size_t n;
    uint8_t *gz = gzip_image_file(3, &n);
    IdxImages good;
    write_bytes("good.gz", gz, n, 0);
    cr_assert_eq(idx_read_images(tmp_path("good"), &good, err, sizeof(err)), 0, "%s", err);
    for (size_t i = 10; i < n; i++) {  // past the gzip header (its flags and mtime may differ harmlessly)
        gz[i] ^= 0x04;
        write_bytes("flipped.gz", gz, n, 0);
        gz[i] ^= 0x04;
        IdxImages images;
        if (idx_read_images(tmp_path("flipped"), &images, err, sizeof(err)) == 0) {
            cr_assert_eq(memcmp(images.pixels, good.pixels, (size_t)3 * 784), 0, "byte %zu flipped: damaged pixels accepted", i);
            idx_free_images(&images);
        }
    }
    idx_free_images(&good);
    free(gz);
}

Test(idx, gzip_trailing_data_rejected) {
    size_t n;
    uint8_t *gz = gzip_image_file(40, &n);
    uint8_t *longer = malloc(2 * n + 16);
    cr_assert_not_null(longer);
    memcpy(longer, gz, n);
    memcpy(longer + n, "junk after it", 13);
    write_bytes("junk.gz", longer, n + 13, 0);
    assert_refused("junk", "bytes after its gzip stream");
    memset(longer + n, 0, 16);  // zero padding is trailing data too
    write_bytes("zeros.gz", longer, n + 16, 0);
    assert_refused("zeros", "gzip");
    // a second gzip member: its trailer agrees with the header, so only reading to the end finds it
    memcpy(longer + n, gz, n);
    write_bytes("two.gz", longer, 2 * n, 0);
    assert_refused("two", "after the end of its gzip stream");
    free(longer);
    free(gz);
}

Test(idx, gzip_promise_beyond_what_the_file_can_hold) {
    // 10,000,000 images in a gzip file of a few hundred bytes: deflate expands at most 1032:1
    uint8_t header[16];
    put_be32(header, 0x803);
    put_be32(header + 4, 10000000);
    put_be32(header + 8, 28);
    put_be32(header + 12, 28);
    write_bytes("promise.gz", header, sizeof(header), 1);
    assert_refused("promise", "more than a");
}

// ----------------------------------------------------------------------------
// nothing blocks: a FIFO, a directory or a device under an IDX name is refused at once

Test(idx, fifo_is_refused_without_blocking, .timeout = 10) {
    cr_assert_eq(mkfifo(tmp_path("images"), 0600), 0);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "not a regular file");
    // the same for one file of a set, with or without .gz
    write_mnist_set(6, 4);
    unlink(tmp_path("t10k-labels-idx1-ubyte.gz"));
    cr_assert_eq(mkfifo(tmp_path("t10k-labels-idx1-ubyte.gz"), 0600), 0);
    MnistSet set;
    assert_error(mnist_load(tmp_dir, &set, err, sizeof(err)), "not a regular file");
    cr_assert_not_null(strstr(err, "t10k-labels-idx1-ubyte.gz"), "%s", err);
}

Test(idx, directory_and_device_refused, .timeout = 10) {
    cr_assert_eq(mkdir(tmp_path("images"), 0700), 0);
    IdxImages images;
    assert_error(idx_read_images(tmp_path("images"), &images, err, sizeof(err)), "directory");
    IdxLabels labels;
    assert_error(idx_read_labels("/dev/zero", &labels, err, sizeof(err)), "not a regular file");
}

// ----------------------------------------------------------------------------
// memory follows the data, never a header's promise: every header of a set is checked (shape,
// counts across files) before any body is read

// A gzip images file of count x rows x cols zero pixels, written in chunks (small and quick to make).
static void write_zero_images_gz(const char *name, uint32_t count, uint32_t rows, uint32_t cols) {
    gzFile f = gzopen(tmp_path(name), "wb1");
    cr_assert_not_null(f);
    uint8_t header[16];
    put_be32(header, 0x803);
    put_be32(header + 4, count);
    put_be32(header + 8, rows);
    put_be32(header + 12, cols);
    cr_assert_eq(gzwrite(f, header, 16), 16);
    static uint8_t zeros[1 << 16];
    size_t left = (size_t)count * rows * cols;
    while (left > 0) {
        unsigned chunk = left < sizeof(zeros) ? (unsigned)left : (unsigned)sizeof(zeros);
        cr_assert_eq(gzwrite(f, zeros, chunk), (int)chunk);
        left -= chunk;
    }
    cr_assert_eq(gzclose(f), Z_OK);
}

static long peak_rss_kb(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

// mnist_load must fail with word in err, having grown the peak resident memory by less than 16 MB.
static void assert_refused_small(const char *word) {
    long before = peak_rss_kb();
    MnistSet set;
    assert_error(mnist_load(tmp_dir, &set, err, sizeof(err)), word);
    long grown_kb = peak_rss_kb() - before;
    cr_assert_lt(grown_kb, 16 * 1024, "refusing the set took %ld MB of memory (%s)", grown_kb / 1024, err);
    cr_assert_null(set.train_images);
}

Test(idx, counts_checked_before_any_body) {
    // 100,000 real (zero) training images, 78 MB uncompressed, but only 6 labels
    write_mnist_set(6, 4);
    unlink(tmp_path("train-images-idx3-ubyte"));
    write_zero_images_gz("train-images-idx3-ubyte.gz", 100000, 28, 28);
    assert_refused_small("mismatch");
    // the training files agree, the test files do not: still refused before the training bodies
    write_labels("train-labels-idx1-ubyte", 100000, -1, 0, 0);
    write_labels("t10k-labels-idx1-ubyte.gz", 3, -1, 0, 1);
    assert_refused_small("mismatch");
}

Test(idx, consistent_decompression_bomb_refused) {
    // every header agrees (100,000 images and labels), but the images are 78 MB of zeros in a gzip file
    // of 80 KB: expanding about 1000:1, past 64 MiB, it is refused before a byte of it is inflated
    write_mnist_set(6, 4);
    unlink(tmp_path("train-images-idx3-ubyte"));
    write_zero_images_gz("train-images-idx3-ubyte.gz", 100000, 28, 28);
    write_labels("train-labels-idx1-ubyte", 100000, -1, 0, 0);
    assert_refused_small("decompression bomb");
    // and a modest one (6 MB, under 64 MiB) still loads: small blank sets are fine
    write_zero_images_gz("train-images-idx3-ubyte.gz", 8000, 28, 28);
    write_labels("train-labels-idx1-ubyte", 8000, -1, 0, 0);
    MnistSet set;
    cr_assert_eq(mnist_load(tmp_dir, &set, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(set.n_train, 8000);
    mnist_free(&set);
}

Test(idx, shape_checked_before_any_body) {
    write_mnist_set(6, 4);
    unlink(tmp_path("train-images-idx3-ubyte"));
    write_zero_images_gz("train-images-idx3-ubyte.gz", 6, 4096, 4096);  // 100 MB of 4096x4096 images
    assert_refused_small("28x28");
}

Test(idx, forged_gzip_length_costs_no_memory) {
    // a header promising 100,000 images over a stream that holds 10, its trailer's length forged to
    // agree with the header: the stream runs out long before the promise, and memory with it
    write_mnist_set(6, 4);
    unlink(tmp_path("train-images-idx3-ubyte"));
    write_labels("train-labels-idx1-ubyte", 100000, -1, 0, 0);
    gzFile f = gzopen(tmp_path("train-images-idx3-ubyte.gz"), "wb");
    cr_assert_not_null(f);
    size_t len;
    uint8_t *bytes = image_bytes(0x803, 10, 28, 28, 0, 3, &len);
    put_be32(bytes + 4, 100000);
    cr_assert_eq(gzwrite(f, bytes, (unsigned)len), (int)len);
    cr_assert_eq(gzclose(f), Z_OK);
    free(bytes);
    FILE *file = fopen(tmp_path("train-images-idx3-ubyte.gz"), "r+b");
    cr_assert_not_null(file);
    uint32_t promised = 16 + 100000u * 784u;
    uint8_t isize[4] = {(uint8_t)promised, (uint8_t)(promised >> 8), (uint8_t)(promised >> 16), (uint8_t)(promised >> 24)};
    cr_assert_eq(fseek(file, -4, SEEK_END), 0);
    cr_assert_eq(fwrite(isize, 1, 4, file), 4);
    cr_assert_eq(fclose(file), 0);
    assert_refused_small("train-images-idx3-ubyte.gz");
}

// ----------------------------------------------------------------------------
// mnist_load: the MNIST shape on top of valid IDX files

Test(idx, mnist_count_mismatch) {
    write_mnist_set(6, 4);
    write_labels("t10k-labels-idx1-ubyte.gz", 5, -1, 0, 1);
    MnistSet set;
    assert_error(mnist_load(tmp_dir, &set, err, sizeof(err)), "mismatch");
    cr_assert_not_null(strstr(err, "t10k-labels-idx1-ubyte"), "%s", err);
    cr_assert_null(set.train_images, "a failed load leaves the set empty");
    cr_assert_null(set.test_images);
}

Test(idx, mnist_label_out_of_range) {
    write_mnist_set(6, 4);
    write_labels("train-labels-idx1-ubyte", 6, 3, 10, 0);
    MnistSet set;
    assert_error(mnist_load(tmp_dir, &set, err, sizeof(err)), "0..9");
    cr_assert_not_null(strstr(err, "label 10 at index 3"), "%s", err);
    write_labels("train-labels-idx1-ubyte", 6, 5, 255, 0);
    assert_error(mnist_load(tmp_dir, &set, err, sizeof(err)), "0..9");
}

Test(idx, mnist_rejects_other_shapes) {
    write_mnist_set(6, 4);
    write_images("train-images-idx3-ubyte", 6, 32, 32, 0);
    MnistSet set;
    assert_error(mnist_load(tmp_dir, &set, err, sizeof(err)), "28x28");
    cr_assert_not_null(strstr(err, "32x32"), "%s", err);
    // idx_read_images itself accepts the shape
    IdxImages images;
    cr_assert_eq(idx_read_images(tmp_path("train-images-idx3-ubyte"), &images, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(images.rows, 32);
    idx_free_images(&images);
}

// ----------------------------------------------------------------------------
// the real data sets, when present

static int have_set(const char *dir) {
    char path[512];
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte", dir);
    if (access(path, R_OK) == 0) return 1;
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
    return access(path, R_OK) == 0;
}

// Counts, range, finiteness and the mean pixel of a real 60k/10k set.
static void check_real_set(const char *dir, double expected_mean, int first_train_label, int first_test_label) {
    MnistSet set;
    cr_assert_eq(mnist_load(dir, &set, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(set.n_train, 60000);
    cr_assert_eq(set.n_test, 10000);
    double sum = 0.0;
    float lo = 1.0f, hi = 0.0f;
    for (size_t i = 0; i < (size_t)60000 * 784; i++) {
        float p = set.train_images[i];
        cr_assert(isfinite(p), "pixel %zu is not finite", i);
        if (p < lo) lo = p;
        if (p > hi) hi = p;
        sum += p;
    }
    for (size_t i = 0; i < (size_t)10000 * 784; i++) {
        cr_assert(set.test_images[i] >= 0.0f && set.test_images[i] <= 1.0f, "test pixel %zu out of [0,1]", i);
    }
    cr_assert_eq(lo, 0.0f);
    cr_assert_eq(hi, 1.0f);
    cr_assert_float_eq(sum / (60000.0 * 784.0), expected_mean, 5e-4, "mean pixel %f", sum / (60000.0 * 784.0));
    cr_assert_eq(set.train_labels[0], first_train_label);
    cr_assert_eq(set.test_labels[0], first_test_label);
    mnist_free(&set);
}

Test(idx, real_mnist) {
    if (!have_set("data/mnist")) cr_skip_test("data/mnist not found: run `make data` and run the tests from the repository root");
    check_real_set("data/mnist", 0.1307, 5, 7);  // the mean everyone normalizes MNIST with
}

Test(idx, real_fashion_mnist_gz) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    if (!have_set(dir)) cr_skip_test("%s not installed (Debian package dataset-fashion-mnist)", dir);
    check_real_set(dir, 0.2860, 9, 9);
}
