// common/idx.h: the MNIST IDX file reader (plain or gzip-compressed), with full validation.
//
// Every failure returns -1 and writes one line into err that says what is wrong with which file and
// what to do ("run make data"). Nothing is left allocated after a failure.
#ifndef IDX_H
#define IDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int count, rows, cols;
    uint8_t *pixels;  // (count, rows, cols) row-major
} IdxImages;

typedef struct {
    int count;
    uint8_t *labels;  // (count,)
} IdxLabels;

// path names the plain file; if it is missing, path + ".gz" is tried.
int idx_read_images(const char *path, IdxImages *out, char *err, size_t err_len);
int idx_read_labels(const char *path, IdxLabels *out, char *err, size_t err_len);
void idx_free_images(IdxImages *images);
void idx_free_labels(IdxLabels *labels);

typedef struct {
    uint8_t *train_pixels;   // (n_train, 784) as the file holds them
    float *train_images;     // (n_train, 784), mnist_pixel_value(pixel) = pixel / 255.0f (common/trainer.h)
    uint8_t *train_labels;   // (n_train,)
    int n_train;
    uint8_t *test_pixels;    // (n_test, 784)
    float *test_images;      // (n_test, 784)
    uint8_t *test_labels;    // (n_test,)
    int n_test;
} MnistSet;

// Loads DIR/train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
// t10k-labels-idx1-ubyte (each plain or .gz): 28x28 images, image and label counts equal, labels 0..9.
int mnist_load(const char *dir, MnistSet *out, char *err, size_t err_len);
void mnist_free(MnistSet *set);

#ifdef __cplusplus
}
#endif

#endif
