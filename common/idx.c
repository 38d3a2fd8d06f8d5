// common/idx.c: reads MNIST-style IDX files (plain or gzip) and loads the four files of a set.
//
// An IDX file is a big-endian header followed by raw uint8 items:
//     images: 0x00000803, count, rows, cols, then count * rows * cols pixels
//     labels: 0x00000801, count, then count labels
// zlib's gzread reads plain and gzip files alike, so "path" and "path.gz" go through one code path.
//
// Validation: a missing file, a wrong magic, a short header, zero items, absurd sizes (count above
// 10,000,000, rows or cols outside 1..4096), a body shorter than the header promises, and bytes left
// over after it are all rejected. Trailing bytes are rejected (not ignored) because they mean the
// header's count does not describe the file, which is corruption, not padding. mnist_load adds the
// MNIST shape: 28x28 images, as many labels as images, labels 0..9.
//
// Pixels become floats as (float)p / 255.0f, exactly what PyTorch's x.float() / 255 computes, so the
// C trainers and the Python baselines see identical inputs.
//
// Built into build/common/libcommon.a by the top Makefile (link with -lz); tested by tests/test_idx.c.
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "idx.h"
#include "message.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_COUNT 10000000u
#define IDX_MAX_DIM 4096u
#define MNIST_SIDE 28

// ----------------------------------------------------------------------------
// helpers


// An open IDX file and the path actually opened (path or path.gz), for messages.
typedef struct {
    gzFile file;
    char path[4096];
} IdxFile;

static int idx_open(const char *path, IdxFile *f, char *err, size_t err_len) {
    if (snprintf(f->path, sizeof(f->path), "%s", path) >= (int)sizeof(f->path)) {
        error_message(err, err_len, "path too long: %.64s...", path);
        return -1;
    }
    errno = 0;
    f->file = gzopen(f->path, "rb");
    if (!f->file && errno == ENOENT) {
        if (snprintf(f->path, sizeof(f->path), "%s.gz", path) >= (int)sizeof(f->path)) {
            error_message(err, err_len, "path too long: %.64s...", path);
            return -1;
        }
        errno = 0;
        f->file = gzopen(f->path, "rb");
    }
    if (!f->file) {
        if (errno == ENOENT) {
            error_message(err, err_len, "missing %s (and no %s.gz): run `make data` or point --data at an IDX directory", path, path);
        } else {
            error_message(err, err_len, "cannot open %s: %s", f->path, errno ? strerror(errno) : "out of memory");
        }
        return -1;
    }
    return 0;
}

static void idx_read_error(IdxFile *f, char *err, size_t err_len) {
    int code;
    const char *msg = gzerror(f->file, &code);
    if (code == Z_ERRNO) {
        error_message(err, err_len, "cannot read %s: %s", f->path, strerror(errno));
    } else {
        error_message(err, err_len, "corrupt gzip data in %s (%s): delete it and run `make data`", f->path, msg);
    }
}

// Reads exactly len bytes unless the file ends first; returns the bytes read, or -1 on a gzip error
// (message in err). gzread takes an unsigned int length, so large bodies are read in chunks.
static int64_t idx_read_bytes(IdxFile *f, uint8_t *dst, size_t len, char *err, size_t err_len) {
    size_t done = 0;
    while (done < len) {
        size_t chunk = len - done;
        if (chunk > (1u << 30)) chunk = 1u << 30;
        int got = gzread(f->file, dst + done, (unsigned)chunk);
        if (got < 0) {
            idx_read_error(f, err, err_len);
            return -1;
        }
        if (got == 0) break;  // end of file; a cut-off gzip stream also ends here, as the truncation it is
        done += (size_t)got;
    }
    return (int64_t)done;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

// Reads the header (4 bytes per field), checks the magic, returns the other fields in dims[]. The
// magic is checked before the rest is read, so a file of the wrong kind is reported as such.
static int idx_read_header(IdxFile *f, uint32_t magic, int n_fields, uint32_t *dims, const char *what,
                           char *err, size_t err_len) {
    uint8_t header[16];  // (n_fields * 4,) big-endian
    size_t header_len = (size_t)n_fields * 4;
    int64_t got = idx_read_bytes(f, header, 4, err, err_len);
    if (got == 4) {
        uint32_t found = be32(header);
        if (found != magic) {
            error_message(err, err_len, "bad magic 0x%08x in %s: not an IDX %s file (those start with 0x%08x)", found,
                    f->path, what, magic);
            return -1;
        }
        int64_t rest = idx_read_bytes(f, header + 4, header_len - 4, err, err_len);
        got = rest < 0 ? -1 : 4 + rest;
    }
    if (got < 0) return -1;
    if ((size_t)got < header_len) {
        error_message(err, err_len, "truncated header in %s: %lld of %zu bytes; delete it and run `make data`",
                f->path, (long long)got, header_len);
        return -1;
    }
    for (int i = 1; i < n_fields; i++) dims[i - 1] = be32(header + 4 * i);
    return 0;
}

// Reads the body of size len into a new buffer and checks that nothing follows it. The buffer starts
// at 1 MiB at most and doubles (up to len) only while bytes keep arriving, so a header that promises
// more than the file holds (a corrupt count, a cut-off download) costs no more memory than the file.
#define IDX_FIRST_CHUNK ((size_t)1 << 20)
static uint8_t *idx_read_body(IdxFile *f, size_t len, const char *what, char *err, size_t err_len) {
    size_t cap = len < IDX_FIRST_CHUNK ? len : IDX_FIRST_CHUNK, done = 0;
    uint8_t *body = malloc(cap);
    for (;;) {
        if (!body) {
            error_message(err, err_len, "out of host memory for %zu bytes of %s from %s", cap, what, f->path);
            return NULL;
        }
        int64_t got = idx_read_bytes(f, body + done, cap - done, err, err_len);
        if (got < 0) {
            free(body);
            return NULL;
        }
        done += (size_t)got;
        if (done < cap || cap == len) break;  // the file ended, or the body is complete
        size_t next = cap > len / 2 ? len : 2 * cap;
        uint8_t *grown = realloc(body, next);
        if (!grown) free(body);
        body = grown;
        cap = next;
    }
    if (done < len) {
        error_message(err, err_len, "truncated %s in %s: header promises %zu bytes, file has %zu; delete it and run `make data`",
                what, f->path, len, done);
        free(body);
        return NULL;
    }
    // This read also reaches the gzip trailer, where a corrupt stream's checksum fails.
    uint8_t extra;
    int more = gzread(f->file, &extra, 1);
    if (more < 0) idx_read_error(f, err, err_len);
    if (more > 0) {
        error_message(err, err_len, "%s has bytes after the %zu bytes of %s its header declares (corrupt file: delete it and run `make data`)",
                f->path, len, what);
    }
    if (more != 0) {
        free(body);
        return NULL;
    }
    return body;
}

// ----------------------------------------------------------------------------
// the two IDX readers

int idx_read_images(const char *path, IdxImages *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    IdxFile f;
    if (idx_open(path, &f, err, err_len) != 0) return -1;
    uint32_t dims[3];  // count, rows, cols
    if (idx_read_header(&f, IDX_MAGIC_IMAGES, 4, dims, "images", err, err_len) != 0) goto fail;
    if (dims[0] == 0) {
        error_message(err, err_len, "%s holds zero images", f.path);
        goto fail;
    }
    if (dims[0] > IDX_MAX_COUNT || dims[1] < 1 || dims[1] > IDX_MAX_DIM || dims[2] < 1 || dims[2] > IDX_MAX_DIM) {
        error_message(err, err_len, "absurd dimensions in %s: %u images of %ux%u (allowed: up to %u images, 1..%u per side)",
                f.path, dims[0], dims[1], dims[2], IDX_MAX_COUNT, IDX_MAX_DIM);
        goto fail;
    }
    size_t len = (size_t)dims[0] * dims[1] * dims[2];
    uint8_t *pixels = idx_read_body(&f, len, "pixels", err, err_len);
    if (!pixels) goto fail;
    gzclose(f.file);
    out->count = (int)dims[0];
    out->rows = (int)dims[1];
    out->cols = (int)dims[2];
    out->pixels = pixels;
    return 0;
fail:
    gzclose(f.file);
    return -1;
}

int idx_read_labels(const char *path, IdxLabels *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    IdxFile f;
    if (idx_open(path, &f, err, err_len) != 0) return -1;
    uint32_t count;
    if (idx_read_header(&f, IDX_MAGIC_LABELS, 2, &count, "labels", err, err_len) != 0) goto fail;
    if (count == 0) {
        error_message(err, err_len, "%s holds zero labels", f.path);
        goto fail;
    }
    if (count > IDX_MAX_COUNT) {
        error_message(err, err_len, "absurd count in %s: %u labels (allowed: up to %u)", f.path, count, IDX_MAX_COUNT);
        goto fail;
    }
    uint8_t *labels = idx_read_body(&f, count, "labels", err, err_len);
    if (!labels) goto fail;
    gzclose(f.file);
    out->count = (int)count;
    out->labels = labels;
    return 0;
fail:
    gzclose(f.file);
    return -1;
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
// MNIST: one split (images + labels) with the MNIST shape checks, then the whole set

static int mnist_load_split(const char *dir, const char *images_name, const char *labels_name,
                            float **images_out, uint8_t **labels_out, int *count_out, char *err, size_t err_len) {
    char images_path[4096], labels_path[4096];
    if (snprintf(images_path, sizeof(images_path), "%s/%s", dir, images_name) >= (int)sizeof(images_path) ||
        snprintf(labels_path, sizeof(labels_path), "%s/%s", dir, labels_name) >= (int)sizeof(labels_path)) {
        error_message(err, err_len, "data directory path too long: %.64s...", dir);
        return -1;
    }
    IdxImages images;
    IdxLabels labels;
    if (idx_read_images(images_path, &images, err, err_len) != 0) return -1;
    if (images.rows != MNIST_SIDE || images.cols != MNIST_SIDE) {
        error_message(err, err_len, "%s holds %dx%d images; MNIST-shaped data must be %dx%d", images_path, images.rows,
                images.cols, MNIST_SIDE, MNIST_SIDE);
        idx_free_images(&images);
        return -1;
    }
    if (idx_read_labels(labels_path, &labels, err, err_len) != 0) {
        idx_free_images(&images);
        return -1;
    }
    int status = -1;
    float *pixels = NULL;  // (count, 784)
    if (labels.count != images.count) {
        error_message(err, err_len, "count mismatch: %s holds %d images but %s holds %d labels", images_path,
                images.count, labels_path, labels.count);
        goto done;
    }
    for (int i = 0; i < labels.count; i++) {
        if (labels.labels[i] > 9) {
            error_message(err, err_len, "label %d at index %d in %s is outside 0..9", labels.labels[i], i, labels_path);
            goto done;
        }
    }
    size_t n_pixels = (size_t)images.count * MNIST_SIDE * MNIST_SIDE;
    pixels = malloc(n_pixels * sizeof(float));
    if (!pixels) {
        error_message(err, err_len, "out of host memory for %d images from %s", images.count, images_path);
        goto done;
    }
    for (size_t i = 0; i < n_pixels; i++) pixels[i] = (float)images.pixels[i] / 255.0f;
    *images_out = pixels;
    *labels_out = labels.labels;  // ownership moves to the caller
    labels.labels = NULL;
    *count_out = images.count;
    status = 0;
done:
    idx_free_images(&images);
    idx_free_labels(&labels);
    return status;
}

int mnist_load(const char *dir, MnistSet *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    if (mnist_load_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", &out->train_images,
                         &out->train_labels, &out->n_train, err, err_len) != 0 ||
        mnist_load_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", &out->test_images,
                         &out->test_labels, &out->n_test, err, err_len) != 0) {
        mnist_free(out);
        return -1;
    }
    return 0;
}

void mnist_free(MnistSet *set) {
    free(set->train_images);
    free(set->train_labels);
    free(set->test_images);
    free(set->test_labels);
    memset(set, 0, sizeof(*set));
}
