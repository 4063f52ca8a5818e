// One fused pass: region of interest -> bilinear resize (stretch or letterbox) -> colour conversion
// -> per-channel (x - mean) * inv_scale -> layout NHWC/NCHW -> u8/f16/f32, written straight into the
// model's input tensor. Compile-time defines select the formats:
//   SRC_FMT: 0 BGR, 1 RGB, 2 GRAY, 3 NV12, 4 I420      DST_COLOR: 0 BGR, 1 RGB, 2 GRAY
//   NCHW: 0/1                                            DST_T: 0 uchar, 1 half, 2 float
// Sampling follows OpenCV's INTER_LINEAR (half-pixel centres, edge clamped). YUV is BT.601 limited range
// converted per source pixel before interpolation, in FFmpeg's (swscale's) own fixed point, chroma of the
// pixel's 2x2 block: the very BGR that decoding to BGR gives, so YUV and BGR frames find the same boxes.

inline float3 yuv2bgr(int y, int u, int v) {
    int l = ((y - 16) * 9539) >> 13;  // 1.1644 in Q13; >> of a negative int is arithmetic in OpenCL C
    int b = l + (((u - 128) * 16525) >> 13);
    int g = l + (((u - 128) * -3209) >> 13) + (((v - 128) * -6660) >> 13);
    int r = l + (((v - 128) * 13075) >> 13);
    return convert_float3(clamp((int3)(b, g, r), 0, 255));
}

inline float3 fetch_bgr(__global const uchar* src, int x, int y, int stride, int w, int h) {
#if SRC_FMT == 0
    __global const uchar* p = src + y * stride + x * 3;
    return (float3)(p[0], p[1], p[2]);
#elif SRC_FMT == 1
    __global const uchar* p = src + y * stride + x * 3;
    return (float3)(p[2], p[1], p[0]);
#elif SRC_FMT == 2
    float g = src[y * stride + x];
    return (float3)(g, g, g);
#elif SRC_FMT == 3
    int Y = src[y * stride + x];
    __global const uchar* uv = src + h * stride + (y >> 1) * stride + (x & ~1);
    return yuv2bgr(Y, uv[0], uv[1]);
#else
    int Y = src[y * stride + x];
    int cw = stride >> 1;
    __global const uchar* u = src + h * stride;
    __global const uchar* v = u + (h >> 1) * cw;
    int ci = (y >> 1) * cw + (x >> 1);
    return yuv2bgr(Y, u[ci], v[ci]);
#endif
}

__kernel void preprocess(__global const uchar* src, int stride, int src_w, int src_h,
                         int roi_x, int roi_y, int roi_w, int roi_h,
                         __global DST_TYPE* dst, int out_w, int out_h, int batch_index,
                         int pad_x, int pad_y, int new_w, int new_h, float pad_value,
                         float m0, float m1, float m2, float s0, float s1, float s2) {
    int dx = get_global_id(0), dy = get_global_id(1);
    if (dx >= out_w || dy >= out_h) return;
    float3 bgr;
    int inside = dx >= pad_x && dx < pad_x + new_w && dy >= pad_y && dy < pad_y + new_h;
    if (inside) {
        float fx = ((float)(dx - pad_x) + 0.5f) * ((float)roi_w / (float)new_w) - 0.5f;
        float fy = ((float)(dy - pad_y) + 0.5f) * ((float)roi_h / (float)new_h) - 0.5f;
        int x0 = (int)floor(fx), y0 = (int)floor(fy);
        float ax = fx - (float)x0, ay = fy - (float)y0;
        int xa = clamp(x0, 0, roi_w - 1) + roi_x, xb = clamp(x0 + 1, 0, roi_w - 1) + roi_x;
        int ya = clamp(y0, 0, roi_h - 1) + roi_y, yb = clamp(y0 + 1, 0, roi_h - 1) + roi_y;
        float3 p00 = fetch_bgr(src, xa, ya, stride, src_w, src_h);
        float3 p01 = fetch_bgr(src, xb, ya, stride, src_w, src_h);
        float3 p10 = fetch_bgr(src, xa, yb, stride, src_w, src_h);
        float3 p11 = fetch_bgr(src, xb, yb, stride, src_w, src_h);
        bgr = (p00 * (1.0f - ax) + p01 * ax) * (1.0f - ay) + (p10 * (1.0f - ax) + p11 * ax) * ay;
    } else {
        bgr = (float3)(pad_value, pad_value, pad_value);
    }
#if DST_COLOR == 2
    const int C = 1;
    float c[1] = { 0.114f * bgr.x + 0.587f * bgr.y + 0.299f * bgr.z };
#elif DST_COLOR == 1
    const int C = 3;
    float c[3] = { bgr.z, bgr.y, bgr.x };
#else
    const int C = 3;
    float c[3] = { bgr.x, bgr.y, bgr.z };
#endif
    float mean[3] = { m0, m1, m2 };
    float inv[3] = { s0, s1, s2 };
    size_t plane = (size_t)out_w * out_h;
    size_t base = (size_t)batch_index * plane * C;
    for (int k = 0; k < C; ++k) {
        float v = (c[k] - mean[k]) * inv[k];
#if NCHW
        size_t i = base + (size_t)k * plane + (size_t)dy * out_w + dx;
#else
        size_t i = base + ((size_t)dy * out_w + dx) * C + k;
#endif
#if DST_T == 0
        dst[i] = convert_uchar_sat_rte(v);
#elif DST_T == 1
        vstore_half(v, i, dst);
#else
        dst[i] = v;
#endif
    }
}
