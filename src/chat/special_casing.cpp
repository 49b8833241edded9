#include "chat/special_casing.h"

#include <algorithm>
#include <iterator>

namespace tern::chat {
namespace {

struct SpecialCase {
  char32_t code_point;
  const char32_t* mapping;
};

// Sorted by code point; Unicode 14's SpecialCasing.txt, as Python 3.11's str methods apply it.
constexpr SpecialCase kUpper[] = {
    {0x00DF, U"\x0053\x0053"}, {0x0149, U"\x02BC\x004E"}, {0x01F0, U"\x004A\x030C"},
    {0x0390, U"\x0399\x0308\x0301"}, {0x03B0, U"\x03A5\x0308\x0301"}, {0x0587, U"\x0535\x0552"},
    {0x1E96, U"\x0048\x0331"}, {0x1E97, U"\x0054\x0308"}, {0x1E98, U"\x0057\x030A"},
    {0x1E99, U"\x0059\x030A"}, {0x1E9A, U"\x0041\x02BE"}, {0x1F50, U"\x03A5\x0313"},
    {0x1F52, U"\x03A5\x0313\x0300"}, {0x1F54, U"\x03A5\x0313\x0301"}, {0x1F56, U"\x03A5\x0313\x0342"},
    {0x1F80, U"\x1F08\x0399"}, {0x1F81, U"\x1F09\x0399"}, {0x1F82, U"\x1F0A\x0399"},
    {0x1F83, U"\x1F0B\x0399"}, {0x1F84, U"\x1F0C\x0399"}, {0x1F85, U"\x1F0D\x0399"},
    {0x1F86, U"\x1F0E\x0399"}, {0x1F87, U"\x1F0F\x0399"}, {0x1F88, U"\x1F08\x0399"},
    {0x1F89, U"\x1F09\x0399"}, {0x1F8A, U"\x1F0A\x0399"}, {0x1F8B, U"\x1F0B\x0399"},
    {0x1F8C, U"\x1F0C\x0399"}, {0x1F8D, U"\x1F0D\x0399"}, {0x1F8E, U"\x1F0E\x0399"},
    {0x1F8F, U"\x1F0F\x0399"}, {0x1F90, U"\x1F28\x0399"}, {0x1F91, U"\x1F29\x0399"},
    {0x1F92, U"\x1F2A\x0399"}, {0x1F93, U"\x1F2B\x0399"}, {0x1F94, U"\x1F2C\x0399"},
    {0x1F95, U"\x1F2D\x0399"}, {0x1F96, U"\x1F2E\x0399"}, {0x1F97, U"\x1F2F\x0399"},
    {0x1F98, U"\x1F28\x0399"}, {0x1F99, U"\x1F29\x0399"}, {0x1F9A, U"\x1F2A\x0399"},
    {0x1F9B, U"\x1F2B\x0399"}, {0x1F9C, U"\x1F2C\x0399"}, {0x1F9D, U"\x1F2D\x0399"},
    {0x1F9E, U"\x1F2E\x0399"}, {0x1F9F, U"\x1F2F\x0399"}, {0x1FA0, U"\x1F68\x0399"},
    {0x1FA1, U"\x1F69\x0399"}, {0x1FA2, U"\x1F6A\x0399"}, {0x1FA3, U"\x1F6B\x0399"},
    {0x1FA4, U"\x1F6C\x0399"}, {0x1FA5, U"\x1F6D\x0399"}, {0x1FA6, U"\x1F6E\x0399"},
    {0x1FA7, U"\x1F6F\x0399"}, {0x1FA8, U"\x1F68\x0399"}, {0x1FA9, U"\x1F69\x0399"},
    {0x1FAA, U"\x1F6A\x0399"}, {0x1FAB, U"\x1F6B\x0399"}, {0x1FAC, U"\x1F6C\x0399"},
    {0x1FAD, U"\x1F6D\x0399"}, {0x1FAE, U"\x1F6E\x0399"}, {0x1FAF, U"\x1F6F\x0399"},
    {0x1FB2, U"\x1FBA\x0399"}, {0x1FB3, U"\x0391\x0399"}, {0x1FB4, U"\x0386\x0399"},
    {0x1FB6, U"\x0391\x0342"}, {0x1FB7, U"\x0391\x0342\x0399"}, {0x1FBC, U"\x0391\x0399"},
    {0x1FC2, U"\x1FCA\x0399"}, {0x1FC3, U"\x0397\x0399"}, {0x1FC4, U"\x0389\x0399"},
    {0x1FC6, U"\x0397\x0342"}, {0x1FC7, U"\x0397\x0342\x0399"}, {0x1FCC, U"\x0397\x0399"},
    {0x1FD2, U"\x0399\x0308\x0300"}, {0x1FD3, U"\x0399\x0308\x0301"}, {0x1FD6, U"\x0399\x0342"},
    {0x1FD7, U"\x0399\x0308\x0342"}, {0x1FE2, U"\x03A5\x0308\x0300"}, {0x1FE3, U"\x03A5\x0308\x0301"},
    {0x1FE4, U"\x03A1\x0313"}, {0x1FE6, U"\x03A5\x0342"}, {0x1FE7, U"\x03A5\x0308\x0342"},
    {0x1FF2, U"\x1FFA\x0399"}, {0x1FF3, U"\x03A9\x0399"}, {0x1FF4, U"\x038F\x0399"},
    {0x1FF6, U"\x03A9\x0342"}, {0x1FF7, U"\x03A9\x0342\x0399"}, {0x1FFC, U"\x03A9\x0399"},
    {0xFB00, U"\x0046\x0046"}, {0xFB01, U"\x0046\x0049"}, {0xFB02, U"\x0046\x004C"},
    {0xFB03, U"\x0046\x0046\x0049"}, {0xFB04, U"\x0046\x0046\x004C"}, {0xFB05, U"\x0053\x0054"},
    {0xFB06, U"\x0053\x0054"}, {0xFB13, U"\x0544\x0546"}, {0xFB14, U"\x0544\x0535"},
    {0xFB15, U"\x0544\x053B"}, {0xFB16, U"\x054E\x0546"}, {0xFB17, U"\x0544\x053D"},
};

constexpr SpecialCase kLower[] = {
    {0x0130, U"\x0069\x0307"},
};

constexpr SpecialCase kTitle[] = {
    {0x00DF, U"\x0053\x0073"}, {0x0149, U"\x02BC\x004E"}, {0x01F0, U"\x004A\x030C"},
    {0x0390, U"\x0399\x0308\x0301"}, {0x03B0, U"\x03A5\x0308\x0301"}, {0x0587, U"\x0535\x0582"},
    {0x1E96, U"\x0048\x0331"}, {0x1E97, U"\x0054\x0308"}, {0x1E98, U"\x0057\x030A"},
    {0x1E99, U"\x0059\x030A"}, {0x1E9A, U"\x0041\x02BE"}, {0x1F50, U"\x03A5\x0313"},
    {0x1F52, U"\x03A5\x0313\x0300"}, {0x1F54, U"\x03A5\x0313\x0301"}, {0x1F56, U"\x03A5\x0313\x0342"},
    {0x1FB2, U"\x1FBA\x0345"}, {0x1FB4, U"\x0386\x0345"}, {0x1FB6, U"\x0391\x0342"},
    {0x1FB7, U"\x0391\x0342\x0345"}, {0x1FC2, U"\x1FCA\x0345"}, {0x1FC4, U"\x0389\x0345"},
    {0x1FC6, U"\x0397\x0342"}, {0x1FC7, U"\x0397\x0342\x0345"}, {0x1FD2, U"\x0399\x0308\x0300"},
    {0x1FD3, U"\x0399\x0308\x0301"}, {0x1FD6, U"\x0399\x0342"}, {0x1FD7, U"\x0399\x0308\x0342"},
    {0x1FE2, U"\x03A5\x0308\x0300"}, {0x1FE3, U"\x03A5\x0308\x0301"}, {0x1FE4, U"\x03A1\x0313"},
    {0x1FE6, U"\x03A5\x0342"}, {0x1FE7, U"\x03A5\x0308\x0342"}, {0x1FF2, U"\x1FFA\x0345"},
    {0x1FF4, U"\x038F\x0345"}, {0x1FF6, U"\x03A9\x0342"}, {0x1FF7, U"\x03A9\x0342\x0345"},
    {0xFB00, U"\x0046\x0066"}, {0xFB01, U"\x0046\x0069"}, {0xFB02, U"\x0046\x006C"},
    {0xFB03, U"\x0046\x0066\x0069"}, {0xFB04, U"\x0046\x0066\x006C"}, {0xFB05, U"\x0053\x0074"},
    {0xFB06, U"\x0053\x0074"}, {0xFB13, U"\x0544\x0576"}, {0xFB14, U"\x0544\x0565"},
    {0xFB15, U"\x0544\x056B"}, {0xFB16, U"\x054E\x0576"}, {0xFB17, U"\x0544\x056D"},
};

template <size_t N>
std::u32string_view find_case(const SpecialCase (&table)[N], char32_t c) {
  auto it = std::lower_bound(std::begin(table), std::end(table), c,
                             [](const SpecialCase& entry, char32_t key) { return entry.code_point < key; });
  if (it == std::end(table) || it->code_point != c) return {};
  return it->mapping;
}

}  // namespace

std::u32string_view special_upper(char32_t c) { return find_case(kUpper, c); }
std::u32string_view special_lower(char32_t c) { return find_case(kLower, c); }
std::u32string_view special_title(char32_t c) { return find_case(kTitle, c); }

}  // namespace tern::chat
