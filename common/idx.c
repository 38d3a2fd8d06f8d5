// common/idx.c: reads MNIST-style IDX files (plain or gzip) and loads the four files of a set
// (docs/DESIGN.md, "Reading IDX files"). Tested by tests/test_idx.c, fuzzed by tests/fuzz/fuzz_idx.c.
//
// An IDX file is a big-endian header followed by raw uint8 items:
//     images: 0x00000803, count, rows, cols, then count * rows * cols pixels
//     labels: 0x00000801, count, then count labels
// A file that starts with the gzip magic (1f 8b) goes through zlib's inflate, so "path" and "path.gz"
// share one code path. zlib's gzread is not used: it reports a missing trailer only through gzerror and
// skips whatever follows a gzip stream without a word, and no zlib call tells where the stream ended;
// trailing bytes mean the header does not describe the file, which is corruption, not padding.
//
// Nothing is allocated for a file that cannot be right: every header of a set is checked (idx_read_header,
// mnist_open_all) before any body is read (idx_read_body, which ends with idx_check_end). Pixels become
// floats as mnist_pixel_value (common/trainer.h), exactly PyTorch's x.float() / 255; the bytes are kept too,
// for the trainers that upload them and scale on the GPU.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"
#include "message.h"
#include "trainer.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_COUNT 10000000u
#define IDX_MAX_DIM 4096u
#define MNIST_SIDE 28
#define GZIP_MAX_RATIO 1032u   // deflate's largest expansion: 258 bytes from 2 bits
#define GZIP_MIN_BYTES 18      // a 10-byte header, an empty deflate block, the 8-byte trailer
#define IDX_INPUT_BYTES ((size_t)1 << 16)
#define IDX_BOMB_BYTES (64.0 * (1 << 20))  // mnist_load: a gzip file that expands past this ...
#define IDX_BOMB_RATIO 100.0               // ... at more than this ratio is refused

// ----------------------------------------------------------------------------
// an open IDX file: the descriptor, the gzip state, the header

typedef struct {
    FILE *file;
    int images;          // 1: an images file, 0: a labels file
    int gz;              // 1: a gzip stream, inflated through z
    int z_ready;         // inflateInit2 succeeded (inflateEnd needed)
    int stream_end;      // gz: inflate reached the end of the stream (CRC-32 and length verified)
    z_stream z;
    uint8_t *input;      // (IDX_INPUT_BYTES,) compressed bytes read from file
    long long file_bytes;
    const char *what;    // "images" or "labels"
    const char *body;    // what the body holds, for messages: "pixels" or "labels"
    uint32_t dims[3];    // count, then rows and cols for images
    size_t header_len, body_len;
    char path[4096];     // the path actually opened (path or path.gz), for messages
} IdxFile;

static void idx_close(IdxFile *f) {
    if (f->z_ready) inflateEnd(&f->z);
    if (f->file) fclose(f->file);
    free(f->input);
    f->file = NULL;
    f->z_ready = 0;
    f->input = NULL;
}

// "cannot read PATH: REASON" from errno; returns -1.
static int idx_read_error(const IdxFile *f, char *err, size_t err_len) {
    error_message(err, err_len, "cannot read %s: %s", f->path, strerror(errno));
    return -1;
}

// Opens path (or path.gz when path does not exist) without blocking; it must be a regular file.
static int idx_open(const char *path, const char *what, IdxFile *f, char *err, size_t err_len) {
    int images = strcmp(what, "images") == 0;
    *f = (IdxFile){.images = images, .what = what, .body = images ? "pixels" : "labels"};
    int fd = -1;
    for (int gz = 0; gz <= 1 && fd < 0; gz++) {  // path, then path.gz when path does not exist
        if (snprintf(f->path, sizeof(f->path), "%s%s", path, gz ? ".gz" : "") >= (int)sizeof(f->path)) {
            error_message(err, err_len, "path too long: %.64s...", path);
            return -1;
        }
        fd = open(f->path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0 && errno != ENOENT) break;
    }
    if (fd < 0 && errno == ENOENT) {
        error_message(err, err_len, "missing %s (and no %s.gz): run `make data` or point --data at an IDX directory", path,
                      path);
        return -1;
    }
    if (fd < 0 || !(f->file = fdopen(fd, "rb"))) {
        error_message(err, err_len, "cannot open %s: %s", f->path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    struct stat info;
    if (fstat(fd, &info) != 0) {
        idx_read_error(f, err, err_len);
        goto fail;
    }
    if (S_ISDIR(info.st_mode)) {
        error_message(err, err_len, "%s is a directory, not an IDX file: point --data at the directory that holds the files",
                      f->path);
        goto fail;
    }
    if (!S_ISREG(info.st_mode)) {
        error_message(err, err_len, "%s is not a regular file (a FIFO, socket or device): an IDX file must be a plain or .gz file on disk",
                      f->path);
        goto fail;
    }
    // regular files never block; drop the flag so that reads behave as usual
    int status_flags = fcntl(fd, F_GETFL);
    if (status_flags >= 0) fcntl(fd, F_SETFL, status_flags & ~O_NONBLOCK);
    f->file_bytes = (long long)info.st_size;

    uint8_t magic[2];
    size_t got = fread(magic, 1, 2, f->file);
    if (ferror(f->file) || fseek(f->file, 0, SEEK_SET) != 0) {
        idx_read_error(f, err, err_len);
        goto fail;
    }
    f->gz = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (f->gz) {
        f->input = malloc(IDX_INPUT_BYTES);
        if (!f->input || inflateInit2(&f->z, 16 + MAX_WBITS) != Z_OK) {  // 16: gzip wrapper only
            error_message(err, err_len, "out of host memory to decompress %s", f->path);
            goto fail;
        }
        f->z_ready = 1;
    }
    return 0;
fail:
    idx_close(f);
    return -1;
}

// Reads up to len bytes of the IDX content (decompressed for gzip); returns the bytes read, fewer only
// when the content ends, or -1 with a message in err.
static int64_t idx_read_bytes(IdxFile *f, uint8_t *dst, size_t len, char *err, size_t err_len) {
    if (!f->gz) {
        size_t got = fread(dst, 1, len, f->file);
        return ferror(f->file) ? idx_read_error(f, err, err_len) : (int64_t)got;
    }
    size_t done = 0;
    while (done < len && !f->stream_end) {
        if (f->z.avail_in == 0) {
            f->z.avail_in = (uInt)fread(f->input, 1, IDX_INPUT_BYTES, f->file);
            f->z.next_in = f->input;
            if (ferror(f->file)) return idx_read_error(f, err, err_len);
            if (f->z.avail_in == 0) break;  // the file ended inside the stream
        }
        f->z.next_out = dst + done;
        f->z.avail_out = (uInt)(len - done < (1u << 30) ? len - done : 1u << 30);
        int status = inflate(&f->z, Z_NO_FLUSH);
        done = (size_t)(f->z.next_out - dst);
        if (status == Z_STREAM_END) {
            f->stream_end = 1;
        } else if (status != Z_OK && status != Z_BUF_ERROR) {
            error_message(err, err_len, "corrupt gzip data in %s (%s): delete it and run `make data`", f->path,
                          f->z.msg ? f->z.msg : "zlib error");
            return -1;
        }
    }
    return (int64_t)done;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

// The file's size against the body its header promises: a plain file exactly as long; a gzip file able to
// hold it (deflate expands at most GZIP_MAX_RATIO:1), with a trailer whose ISIZE (the uncompressed length
// mod 2^32, little-endian) agrees.
static int idx_check_size(const IdxFile *f, char *err, size_t err_len) {
    unsigned long long total = (unsigned long long)f->header_len + f->body_len;
    unsigned long long size = (unsigned long long)f->file_bytes;
    if (!f->gz && size < total) {
        error_message(err, err_len, "truncated %s in %s: header promises %zu bytes, file has %llu; delete it and run `make data`",
                      f->body, f->path, f->body_len, size - f->header_len);
        return -1;
    }
    if (!f->gz && size > total) {
        error_message(err, err_len, "%s has %llu bytes after the %zu bytes of %s its header declares (corrupt file: delete it and run `make data`)",
                      f->path, size - total, f->body_len, f->body);
        return -1;
    }
    if (!f->gz) return 0;
    if (f->file_bytes < GZIP_MIN_BYTES || total / GZIP_MAX_RATIO > size) {
        error_message(err, err_len, "truncated %s in %s: header promises %zu bytes, more than a %lld-byte gzip file can hold; delete it and run `make data`",
                      f->body, f->path, f->body_len, f->file_bytes);
        return -1;
    }
    uint8_t trailer[4];
    if (pread(fileno(f->file), trailer, 4, (off_t)f->file_bytes - 4) != 4) return idx_read_error(f, err, err_len);
    uint32_t isize = (uint32_t)trailer[0] | ((uint32_t)trailer[1] << 8) | ((uint32_t)trailer[2] << 16) |
                     ((uint32_t)trailer[3] << 24);
    if (isize != (uint32_t)total) {
        error_message(err, err_len, "truncated or corrupt gzip file %s (cut off, damaged, or with bytes after its gzip stream): its trailer records %u bytes (mod 2^32), its header promises %llu; delete it and run `make data`",
                      f->path, isize, total);
        return -1;
    }
    return 0;
}

// The header, before a byte of the body is read or allocated: the magic, then the count (and rows and cols
// for images) into f->dims, a count of 1 .. IDX_MAX_COUNT and images of 1 .. IDX_MAX_DIM a side, then the
// file's size (idx_check_size).
static int idx_read_header(IdxFile *f, char *err, size_t err_len) {
    uint32_t magic = f->images ? IDX_MAGIC_IMAGES : IDX_MAGIC_LABELS;
    int n_fields = f->images ? 4 : 2;
    uint8_t header[16];  // (n_fields * 4,) big-endian
    f->header_len = (size_t)n_fields * 4;
    int64_t got = idx_read_bytes(f, header, 4, err, err_len);
    if (got == 4) {
        uint32_t found = be32(header);
        if (found != magic) {
            error_message(err, err_len, "bad magic 0x%08x in %s: not an IDX %s file (those start with 0x%08x)", found,
                          f->path, f->what, magic);
            return -1;
        }
        int64_t rest = idx_read_bytes(f, header + 4, f->header_len - 4, err, err_len);
        got = rest < 0 ? -1 : 4 + rest;
    }
    if (got < 0) return -1;
    if ((size_t)got < f->header_len) {
        error_message(err, err_len, "truncated header in %s: %lld of %zu bytes; delete it and run `make data`", f->path,
                      (long long)got, f->header_len);
        return -1;
    }
    for (int i = 1; i < n_fields; i++) f->dims[i - 1] = be32(header + 4 * i);
    uint32_t count = f->dims[0], rows = f->dims[1], cols = f->dims[2];
    if (count == 0) {
        error_message(err, err_len, "%s holds zero %s", f->path, f->what);
        return -1;
    }
    if (f->images && (count > IDX_MAX_COUNT || rows < 1 || rows > IDX_MAX_DIM || cols < 1 || cols > IDX_MAX_DIM)) {
        error_message(err, err_len, "absurd dimensions in %s: %u images of %ux%u (allowed: up to %u images, 1..%u per side)",
                      f->path, count, rows, cols, IDX_MAX_COUNT, IDX_MAX_DIM);
        return -1;
    }
    if (count > IDX_MAX_COUNT) {
        error_message(err, err_len, "absurd count in %s: %u labels (allowed: up to %u)", f->path, count, IDX_MAX_COUNT);
        return -1;
    }
    f->body_len = (size_t)count * (f->images ? (size_t)rows * cols : 1);
    return idx_check_size(f, err, err_len);
}

// Nothing may follow the body, and a gzip stream must end, verified, with nothing after it.
static int idx_check_end(IdxFile *f, char *err, size_t err_len) {
    uint8_t extra;
    int64_t more = idx_read_bytes(f, &extra, 1, err, err_len);  // reaches the gzip trailer, if any
    if (more < 0) return -1;
    if (more > 0) {
        error_message(err, err_len, "%s has bytes after the %zu bytes of %s its header declares (corrupt file: delete it and run `make data`)",
                      f->path, f->body_len, f->body);
        return -1;
    }
    if (!f->gz) return 0;
    if (!f->stream_end) {
        error_message(err, err_len, "truncated gzip stream in %s: it ends before its trailer (CRC-32 and length), so the data cannot be verified; delete it and run `make data`",
                      f->path);
        return -1;
    }
    int after = f->z.avail_in > 0 || fgetc(f->file) != EOF;
    if (ferror(f->file)) return idx_read_error(f, err, err_len);
    if (after) {
        error_message(err, err_len, "%s has data after the end of its gzip stream (trailing bytes or a second gzip member): delete it and run `make data`",
                      f->path);
        return -1;
    }
    return 0;
}

// Reads the body of the size the header gives into a new buffer, then checks the end (idx_check_end). The
// buffer starts at 1 MiB at most and doubles (up to the body's size) only while bytes keep arriving.
#define IDX_FIRST_CHUNK ((size_t)1 << 20)
static uint8_t *idx_read_body(IdxFile *f, char *err, size_t err_len) {
    size_t len = f->body_len;
    size_t cap = len < IDX_FIRST_CHUNK ? len : IDX_FIRST_CHUNK, done = 0;
    uint8_t *body = malloc(cap);
    for (;;) {
        if (!body) {
            error_message(err, err_len, "out of host memory for %zu bytes of %s from %s", cap, f->body, f->path);
            return NULL;
        }
        int64_t got = idx_read_bytes(f, body + done, cap - done, err, err_len);
        if (got < 0) {
            free(body);
            return NULL;
        }
        done += (size_t)got;
        if (done < cap || cap == len) break;  // the content ended, or the body is complete
        size_t next = cap > len / 2 ? len : 2 * cap;
        uint8_t *grown = realloc(body, next);
        if (!grown) free(body);
        body = grown;
        cap = next;
    }
    if (done < len) {
        error_message(err, err_len, "truncated %s in %s: header promises %zu bytes, file has %zu; delete it and run `make data`",
                      f->body, f->path, len, done);
        free(body);
        return NULL;
    }
    if (idx_check_end(f, err, err_len) != 0) {
        free(body);
        return NULL;
    }
    return body;
}

// ----------------------------------------------------------------------------
// the two IDX readers

// One IDX file, opened, checked and read whole: its body (the caller frees it), or NULL with a message.
static uint8_t *idx_read(const char *path, const char *what, IdxFile *f, char *err, size_t err_len) {
    if (idx_open(path, what, f, err, err_len) != 0) return NULL;
    uint8_t *body = idx_read_header(f, err, err_len) == 0 ? idx_read_body(f, err, err_len) : NULL;
    idx_close(f);
    return body;
}

int idx_read_images(const char *path, IdxImages *out, char *err, size_t err_len) {
    IdxFile f;
    uint8_t *pixels = idx_read(path, "images", &f, err, err_len);
    *out = pixels ? (IdxImages){(int)f.dims[0], (int)f.dims[1], (int)f.dims[2], pixels} : (IdxImages){0};
    return pixels ? 0 : -1;
}

int idx_read_labels(const char *path, IdxLabels *out, char *err, size_t err_len) {
    IdxFile f;
    uint8_t *labels = idx_read(path, "labels", &f, err, err_len);
    *out = labels ? (IdxLabels){(int)f.dims[0], labels} : (IdxLabels){0};
    return labels ? 0 : -1;
}

void idx_free_images(IdxImages *images) {
    free(images->pixels);
    memset(images, 0, sizeof(*images));
}

void idx_free_labels(IdxLabels *labels) {
    free(labels->labels);
    memset(labels, 0, sizeof(*labels));
}

// ----------------------------------------------------------------------------
// MNIST: the four headers first (shape and counts), then the bodies

enum { TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS, MNIST_FILES };
static const char *const MNIST_NAMES[MNIST_FILES] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                                     "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

// Every header of the set, checked against the MNIST shape and against each other, before any body.
static int mnist_open_all(const char *dir, IdxFile files[MNIST_FILES], char *err, size_t err_len) {
    for (int i = 0; i < MNIST_FILES; i++) {
        char path[4096];
        if (snprintf(path, sizeof(path), "%s/%s", dir, MNIST_NAMES[i]) >= (int)sizeof(path)) {
            error_message(err, err_len, "data directory path too long: %.64s...", dir);
            return -1;
        }
        int images = i == TRAIN_IMAGES || i == TEST_IMAGES;
        if (idx_open(path, images ? "images" : "labels", &files[i], err, err_len) != 0) return -1;
        if (idx_read_header(&files[i], err, err_len) != 0) return -1;
        if (images && (files[i].dims[1] != MNIST_SIDE || files[i].dims[2] != MNIST_SIDE)) {
            error_message(err, err_len, "%s holds %ux%u images; MNIST-shaped data must be %dx%d", files[i].path,
                          files[i].dims[1], files[i].dims[2], MNIST_SIDE, MNIST_SIDE);
            return -1;
        }
        if (!images && files[i].dims[0] != files[i - 1].dims[0]) {
            error_message(err, err_len, "count mismatch: %s holds %u images but %s holds %u labels", files[i - 1].path,
                          files[i - 1].dims[0], files[i].path, files[i].dims[0]);
            return -1;
        }
    }
    // Headers that agree can describe a decompression bomb: blank images compress about 1000:1, image
    // data a few times (MNIST 4.7:1). A gzip file that would expand past 64 MiB at more than 100:1 is refused.
    for (int i = 0; i < MNIST_FILES; i++) {
        double expanded = (double)(files[i].header_len + files[i].body_len);
        double ratio = files[i].gz && files[i].file_bytes > 0 ? expanded / (double)files[i].file_bytes : 0.0;
        if (expanded > IDX_BOMB_BYTES && ratio > IDX_BOMB_RATIO) {
            error_message(err, err_len, "%s would expand %.0f times, from %.1f MB to %.1f GB: not image data (a decompression bomb?); delete it and run `make data`",
                          files[i].path, ratio, (double)files[i].file_bytes / 1e6, expanded / 1e9);
            return -1;
        }
    }
    // Headers that agree can still describe more than this machine holds (10,000,000 blank images are
    // 7.6 MB of gzip): pixels, their floats and the labels, against the physical memory, before reading.
    double need = 0.0;
    for (int i = 0; i < MNIST_FILES; i += 2) need += (double)files[i].dims[0] * (MNIST_SIDE * MNIST_SIDE * 5.0 + 1.0);
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0 && need > (double)pages * (double)page_size) {
        error_message(err, err_len, "out of host memory: %s and %s hold %u and %u images (%.1f GB to load), more than this machine's %.1f GB",
                      files[TRAIN_IMAGES].path, files[TEST_IMAGES].path, files[TRAIN_IMAGES].dims[0],
                      files[TEST_IMAGES].dims[0], need / 1e9, (double)pages * (double)page_size / 1e9);
        return -1;
    }
    return 0;
}

// One split into the set's arrays (which mnist_load frees on a failure): the labels, checked 0..9, and the
// pixels, as bytes and as floats.
static int mnist_read_split(IdxFile *images_file, IdxFile *labels_file, uint8_t **pixels, float **images,
                            uint8_t **labels, int *count, char *err, size_t err_len) {
    *count = (int)images_file->dims[0];
    if (!(*labels = idx_read_body(labels_file, err, err_len))) return -1;
    for (int i = 0; i < *count; i++)
        if ((*labels)[i] > 9) {
            error_message(err, err_len, "label %d at index %d in %s is outside 0..9", (*labels)[i], i,
                          labels_file->path);
            return -1;
        }
    if (!(*pixels = idx_read_body(images_file, err, err_len))) return -1;
    size_t n_pixels = (size_t)*count * MNIST_SIDE * MNIST_SIDE;
    *images = malloc(n_pixels * sizeof(float));  // (count, 784)
    if (!*images) {
        error_message(err, err_len, "out of host memory for %d images from %s", *count, images_file->path);
        return -1;
    }
    for (size_t i = 0; i < n_pixels; i++) (*images)[i] = mnist_pixel_value((*pixels)[i]);
    return 0;
}

int mnist_load(const char *dir, MnistSet *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    IdxFile files[MNIST_FILES] = {0};
    int status = -1;
    if (mnist_open_all(dir, files, err, err_len) == 0 &&
        mnist_read_split(&files[TRAIN_IMAGES], &files[TRAIN_LABELS], &out->train_pixels, &out->train_images,
                         &out->train_labels, &out->n_train, err, err_len) == 0 &&
        mnist_read_split(&files[TEST_IMAGES], &files[TEST_LABELS], &out->test_pixels, &out->test_images,
                         &out->test_labels, &out->n_test, err, err_len) == 0)
        status = 0;
    for (int i = 0; i < MNIST_FILES; i++) idx_close(&files[i]);
    if (status != 0) mnist_free(out);
    return status;
}

void mnist_free(MnistSet *set) {
    free(set->train_pixels);
    free(set->test_pixels);
    free(set->train_images);
    free(set->train_labels);
    free(set->test_images);
    free(set->test_labels);
    memset(set, 0, sizeof(*set));
}
