// A small, safe Markdown renderer for model replies: everything is escaped first, then fenced code blocks
// (``` with a language; an unclosed fence runs to the end, as while a reply streams), headings, lists, quotes,
// paragraphs, and inline code, bold, italic and http(s) links. No HTML from the model ever reaches the page.
const escape = (s) => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

function inline(text) {
  const codes = [];
  let s = escape(text).replace(/`([^`\n]+)`/g, (_, c) => `\u0000${codes.push(c) - 1}\u0000`);
  s = s.replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, '$1<em>$2</em>')
    .replace(/(^|[^_\w])_([^_\n]+)_(?!\w)/g, '$1<em>$2</em>')
    .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)"]+)\)/g, '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[Number(i)]}</code>`);
}

function blocks(text) {
  const out = [];
  let para = [], list = null;
  const flushPara = () => { if (para.length) out.push(`<p>${para.map(inline).join('<br>')}</p>`); para = []; };
  const flushList = () => { if (list) out.push(`<${list.tag}>${list.items.map((i) => `<li>${inline(i)}</li>`).join('')}</${list.tag}>`); list = null; };
  for (const line of text.split('\n')) {
    let m;
    if (!line.trim()) { flushPara(); flushList(); continue; }
    if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
      flushPara(); flushList();
      out.push(`<h${m[1].length + 2 > 6 ? 6 : m[1].length + 2}>${inline(m[2])}</h${m[1].length + 2 > 6 ? 6 : m[1].length + 2}>`);
    } else if ((m = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/))) {
      flushPara();
      const tag = /\d/.test(m[1]) ? 'ol' : 'ul';
      if (!list || list.tag !== tag) { flushList(); list = { tag, items: [] }; }
      list.items.push(m[2]);
    } else if ((m = line.match(/^>\s?(.*)$/))) {
      flushPara(); flushList();
      out.push(`<blockquote>${inline(m[1])}</blockquote>`);
    } else {
      flushList();
      para.push(line);
    }
  }
  flushPara(); flushList();
  return out.join('');
}

export function renderMarkdown(text) {
  const parts = [];
  const fence = /^```([\w+-]*)[^\n]*\n([\s\S]*?)(?:^```[ \t]*$|(?![\s\S]))/gm;
  let last = 0, m;
  while ((m = fence.exec(text))) {
    parts.push(blocks(text.slice(last, m.index)));
    const lang = m[1] ? ` class="language-${escape(m[1])}"` : '';
    parts.push(`<pre><code${lang}>${escape(m[2].replace(/\n$/, ''))}</code></pre>`);
    last = fence.lastIndex;
    if (m[0].length === 0) break;
  }
  parts.push(blocks(text.slice(last)));
  return parts.join('');
}
