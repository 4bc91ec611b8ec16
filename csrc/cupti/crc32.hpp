// The CRC-32 of the checksum records that follow each write of gpu.rows and gpu.names (the
// tracer's) and that the reader verifies with Python's zlib.crc32. Included by tracer.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace {

// CRC-32 as zlib computes it (reflected polynomial 0xEDB88320; Python's zlib.crc32, which the
// reader checks with), slicing by 8 bytes at a time. A copy of its own rather than zlib's: no
// library or header to find at build time, in every environment the extension is built in.
uint32_t crc32(const void *data, size_t size, uint32_t crc = 0) {
    static const auto tables = [] {
        std::array<std::array<uint32_t, 256>, 8> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; ++i)
            for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
        return t;
    }();
    const auto *p = static_cast<const uint8_t *>(data);
    crc = ~crc;
    for (; size >= 8; p += 8, size -= 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^ tables[4][lo >> 24] ^
              tables[3][hi & 0xFF] ^ tables[2][(hi >> 8) & 0xFF] ^ tables[1][(hi >> 16) & 0xFF] ^ tables[0][hi >> 24];
    }
    for (; size > 0; ++p, --size) crc = tables[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
    return ~crc;
}
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gpu.rows and gpu.rows.crc are little-endian");

}  // namespace
