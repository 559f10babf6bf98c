// The rtsdb page: builds /api/query requests from its controls, charts the
// answer with uPlot, and keeps its whole state in the URL's fragment in the
// same words /q uses (start, end, m=, o=), so a /q link opens here too.
(function () {
  'use strict';

  var $ = function (sel, el) { return (el || document).querySelector(sel); };
  var $$ = function (sel, el) { return Array.prototype.slice.call((el || document).querySelectorAll(sel)); };

  // Above this many series the legend is a searchable list instead of
  // uPlot's live table, and hover shows the top values only.
  var BIG = 20;
  var DS_FUNCS = ['avg', 'sum', 'min', 'max', 'count', 'first', 'last', 'dev', 'zimsum', 'mimmin', 'mimmax',
    'p50', 'p75', 'p90', 'p95', 'p99', 'p999'];
  var aggregators = ['sum', 'avg', 'min', 'max', 'count', 'dev', 'zimsum', 'mimmin', 'mimmax', 'none'];

  // What the page shows; `window.rtsdb` exposes it (and tests read it).
  var app = {
    state: null,
    result: null,
    chart: null,
    error: null,
    requests: 0
  };
  window.rtsdb = app;

  // ---- credentials (docs/security.md) ----
  // With authentication on, the API answers 401 without a token: the page
  // then asks for one (TOKEN, or NAME:TOKEN), keeps it in sessionStorage
  // for this tab's session only, and sends it on every request it makes.
  // Every call below goes through this `fetch`, which shadows the global.
  var TOKEN_KEY = 'rtsdb.token';

  function authHeader(token) {
    return token.indexOf(':') >= 0 ? 'Basic ' + btoa(token) : 'Bearer ' + token;
  }

  function fetch(url, opts) {
    var sent = window.sessionStorage.getItem(TOKEN_KEY);
    var send = function (token) {
      var o = Object.assign({}, opts || {});
      if (token) o.headers = Object.assign({}, o.headers || {}, { Authorization: authHeader(token) });
      return window.fetch(url, o);
    };
    return send(sent).then(function (r) {
      if (r.status !== 401) return r;
      // Another request may have asked already while this one was out.
      var now = window.sessionStorage.getItem(TOKEN_KEY);
      if (now && now !== sent) return send(now);
      var token = window.prompt('This TSD needs a token (TOKEN or NAME:TOKEN):', '');
      if (!token) return r;
      window.sessionStorage.setItem(TOKEN_KEY, token.trim());
      return send(token.trim());
    });
  }

  // ---- state <-> URL (the /q vocabulary) ----

  function emptyMetric() {
    return { metric: '', agg: 'sum', ds: '', dsAgg: 'avg', fill: '', rate: false, counter: false,
      cmax: '', reset: '', y2: false, tags: [] };
  }

  // The zone absolute times are read in: the browser's, unless the URL
  // names one (so a shared link means the same range everywhere).
  function browserZone() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ''; } catch (e) { return ''; }
  }

  function defaultState() {
    return { start: '1h-ago', end: '', tz: browserZone(), refresh: 0, ylog: false, view: 'chart',
      metrics: [emptyMetric()] };
  }

  // One filter as m= writes it: `key=type(value)`; literal_or stays bare.
  function filterText(t) {
    if (t.type === 'literal_or') return t.key + '=' + t.value;
    return t.key + '=' + t.type + '(' + t.value + ')';
  }

  // A metric line as an m= sub-query.
  function mText(m) {
    var parts = [m.agg || 'sum'];
    if (m.rate) {
      var opts = [];
      if (m.counter) {
        opts.push('counter');
        if (m.cmax || m.reset) opts.push(m.cmax || '');
        if (m.reset) opts.push(m.reset);
      }
      parts.push(opts.length ? 'rate{' + opts.join(',') + '}' : 'rate');
    }
    if (m.ds) parts.push(m.ds + '-' + (m.dsAgg || 'avg') + (m.fill ? '-' + m.fill : ''));
    var grouped = m.tags.filter(function (t) { return t.key && t.value && t.group; }).map(filterText);
    var other = m.tags.filter(function (t) { return t.key && t.value && !t.group; }).map(filterText);
    var name = m.metric;
    if (grouped.length || other.length) name += '{' + grouped.join(',') + '}';
    if (other.length) name += '{' + other.join(',') + '}';
    parts.push(name);
    return parts.join(':');
  }

  // Splits on `sep` outside braces and parentheses.
  function splitTop(s, sep) {
    var out = [], depth = 0, cur = '';
    for (var i = 0; i < s.length; i++) {
      var c = s[i];
      if (c === '{' || c === '(') depth++;
      if (c === '}' || c === ')') depth--;
      if (c === sep && depth === 0) { out.push(cur); cur = ''; } else { cur += c; }
    }
    out.push(cur);
    return out;
  }

  function parseFilters(body, group) {
    if (!body) return [];
    return splitTop(body, ',').filter(Boolean).map(function (f) {
      var eq = f.indexOf('=');
      var key = f.slice(0, eq), v = f.slice(eq + 1);
      var fn = /^([a-z_]+)\((.*)\)$/.exec(v);
      if (fn) return { key: key, type: fn[1], value: fn[2], group: group };
      // The 1.x forms: `*` is a wildcard, anything else literal values.
      return { key: key, type: v.indexOf('*') >= 0 ? 'wildcard' : 'literal_or', value: v, group: group };
    });
  }

  // An m= sub-query back into a metric line.
  function parseM(s) {
    var m = emptyMetric();
    var parts = splitTop(s, ':');
    m.agg = parts[0];
    var last = parts[parts.length - 1];
    var brace = last.indexOf('{');
    m.metric = brace < 0 ? last : last.slice(0, brace);
    if (brace >= 0) {
      var groups = [], rest = last.slice(brace);
      var re = /\{([^}]*)\}/g, g;
      while ((g = re.exec(rest))) groups.push(g[1]);
      m.tags = parseFilters(groups[0], true).concat(parseFilters(groups[1], false));
    }
    parts.slice(1, -1).forEach(function (p) {
      if (/^rate/.test(p)) {
        m.rate = true;
        var o = /\{(.*)\}/.exec(p);
        if (o) {
          var f = o[1].split(',');
          m.counter = f[0] === 'counter';
          m.cmax = f[1] || '';
          m.reset = f[2] || '';
        }
      } else if (/^[0-9]/.test(p)) {
        var d = p.split('-');
        m.ds = d[0];
        m.dsAgg = d[1] || 'avg';
        m.fill = d[2] || '';
      }
    });
    return m;
  }

  function toHash(s) {
    var q = [['start', s.start]];
    if (s.end) q.push(['end', s.end]);
    if (s.tz) q.push(['tz', s.tz]);
    s.metrics.filter(function (m) { return m.metric; }).forEach(function (m) {
      q.push(['m', mText(m)]);
      q.push(['o', m.y2 ? 'axis x1y2' : '']);
    });
    if (s.ylog) q.push(['ylog', '']);
    if (s.refresh) q.push(['refresh', String(s.refresh)]);
    if (s.view !== 'chart') q.push(['view', s.view]);
    return q.map(function (p) {
      return p[1] === '' && p[0] !== 'o' ? p[0] : p[0] + '=' + encodeURIComponent(p[1]).replace(/%3A/g, ':').replace(/%2C/g, ',');
    }).join('&');
  }

  function fromHash(hash) {
    var s = defaultState();
    if (!hash) return s;
    s.metrics = [];
    var os = [];
    hash.replace(/^#/, '').split('&').forEach(function (kv) {
      if (!kv) return;
      var eq = kv.indexOf('=');
      var k = eq < 0 ? kv : kv.slice(0, eq);
      var v = eq < 0 ? '' : decodeURIComponent(kv.slice(eq + 1).replace(/\+/g, ' '));
      if (k === 'start') s.start = v;
      else if (k === 'end') s.end = v;
      else if (k === 'tz') s.tz = v;
      else if (k === 'm') s.metrics.push(parseM(v));
      else if (k === 'o') os.push(v);
      else if (k === 'ylog') s.ylog = true;
      else if (k === 'refresh') s.refresh = parseInt(v, 10) || 0;
      else if (k === 'view') s.view = v;
    });
    os.forEach(function (o, i) { if (s.metrics[i]) s.metrics[i].y2 = o.indexOf('x1y2') >= 0; });
    if (!s.metrics.length) s.metrics.push(emptyMetric());
    return s;
  }

  // The /api/query body for the state.
  function apiQuery(s) {
    var q = { start: s.start || '1h-ago', queries: [], globalAnnotations: true };
    if (s.end) q.end = s.end;
    if (s.tz) q.timezone = s.tz;
    s.metrics.filter(function (m) { return m.metric; }).forEach(function (m) {
      var sub = { aggregator: m.agg || 'sum', metric: m.metric };
      if (m.rate) {
        sub.rate = true;
        if (m.counter) {
          sub.rateOptions = { counter: true };
          if (m.cmax) sub.rateOptions.counterMax = Number(m.cmax);
          if (m.reset) sub.rateOptions.resetValue = Number(m.reset);
        }
      }
      if (m.ds) sub.downsample = m.ds + '-' + (m.dsAgg || 'avg') + (m.fill ? '-' + m.fill : '');
      var filters = m.tags.filter(function (t) { return t.key && t.value; }).map(function (t) {
        return { type: t.type, tagk: t.key, filter: t.value, groupBy: !!t.group };
      });
      if (filters.length) sub.filters = filters;
      q.queries.push(sub);
    });
    // Each result then names its sub-query, to put it on its axis.
    if (s.metrics.some(function (m) { return m.metric && m.y2; })) q.showQuery = true;
    return q;
  }

  // ---- controls ----

  var suggestId = 0;

  // Suggestions from /api/suggest as the user types.
  function suggest(input, type) {
    var list = document.createElement('datalist');
    list.id = 'suggest-' + (++suggestId);
    document.body.appendChild(list);
    input.setAttribute('list', list.id);
    var timer = null;
    input.addEventListener('input', function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        fetch('api/suggest?type=' + type + '&max=25&q=' + encodeURIComponent(input.value))
          .then(function (r) { return r.ok ? r.json() : []; })
          .then(function (names) {
            list.innerHTML = '';
            names.forEach(function (n) {
              var o = document.createElement('option');
              o.value = n;
              list.appendChild(o);
            });
          })
          .catch(function () {});
      }, 150);
    });
  }

  function fillSelect(sel, values, chosen) {
    sel.innerHTML = '';
    // A value from a URL is kept even if unknown: the server says why not.
    if (chosen && values.indexOf(chosen) < 0) values = values.concat([chosen]);
    values.forEach(function (v) {
      var o = document.createElement('option');
      o.value = o.textContent = v;
      sel.appendChild(o);
    });
    sel.value = chosen;
  }

  function addTagRow(box, t) {
    var row = $('#tag-template').content.firstElementChild.cloneNode(true);
    $('.t-key', row).value = t.key || '';
    $('.t-type', row).value = t.type || 'literal_or';
    $('.t-value', row).value = t.value || '';
    $('.t-group', row).checked = t.group !== false;
    suggest($('.t-key', row), 'tagk');
    suggest($('.t-value', row), 'tagv');
    $('.remove', row).addEventListener('click', function () { row.remove(); });
    box.appendChild(row);
  }

  function addMetricBox(m) {
    var box = $('#metric-template').content.firstElementChild.cloneNode(true);
    $('.m-name', box).value = m.metric;
    fillSelect($('.m-agg', box), aggregators, m.agg);
    fillSelect($('.m-ds-agg', box), DS_FUNCS, m.dsAgg);
    $('.m-ds', box).value = m.ds;
    $('.m-fill', box).value = m.fill;
    $('.m-rate', box).checked = m.rate;
    $('.m-counter', box).checked = m.counter;
    $('.m-cmax', box).value = m.cmax;
    $('.m-reset', box).value = m.reset;
    $('.m-y2', box).checked = m.y2;
    suggest($('.m-name', box), 'metrics');
    m.tags.forEach(function (t) { addTagRow($('.tags', box), t); });
    $('.add-tag', box).addEventListener('click', function () {
      addTagRow($('.tags', box), { type: 'literal_or', group: true });
    });
    $('.remove', box).addEventListener('click', function () {
      if ($$('#metrics .metric').length > 1) box.remove();
    });
    $('#metrics').appendChild(box);
  }

  function showState(s) {
    $('#start').value = s.start;
    $('#end').value = s.end;
    $('#refresh').value = String(s.refresh);
    $('#ylog').checked = s.ylog;
    $('#metrics').innerHTML = '';
    s.metrics.forEach(addMetricBox);
    showView(s.view);
  }

  function readState() {
    var s = {
      start: $('#start').value.trim() || '1h-ago',
      end: $('#end').value.trim(),
      tz: app.state ? app.state.tz : browserZone(),
      refresh: parseInt($('#refresh').value, 10) || 0,
      ylog: $('#ylog').checked,
      view: app.state ? app.state.view : 'chart',
      metrics: $$('#metrics .metric').map(function (box) {
        return {
          metric: $('.m-name', box).value.trim(),
          agg: $('.m-agg', box).value,
          ds: $('.m-ds', box).value.trim(),
          dsAgg: $('.m-ds-agg', box).value,
          fill: $('.m-fill', box).value,
          rate: $('.m-rate', box).checked,
          counter: $('.m-counter', box).checked,
          cmax: $('.m-cmax', box).value.trim(),
          reset: $('.m-reset', box).value.trim(),
          y2: $('.m-y2', box).checked,
          tags: $$('.tag', box).map(function (row) {
            return {
              key: $('.t-key', row).value.trim(),
              type: $('.t-type', row).value,
              value: $('.t-value', row).value.trim(),
              group: $('.t-group', row).checked
            };
          })
        };
      })
    };
    return s;
  }

  function showView(v) {
    ['chart', 'table', 'browse', 'cardinality'].forEach(function (name) {
      $('#view-' + name).hidden = name !== v;
    });
    $$('.tab').forEach(function (b) { b.classList.toggle('active', b.dataset.view === v); });
    if (v === 'browse') browse();
    if (v === 'cardinality') cardinality();
    if (v === 'table') showTable();
  }

  function showTable() {
    if (!app.table || app.table.drawn) return;
    app.table.drawn = true;
    drawTable(app.table.names, app.table.data);
  }

  // ---- running a query ----

  function setStatus(st, extra) {
    var el = $('#summary');
    el.dataset.state = st;
    Object.keys(extra || {}).forEach(function (k) { el.dataset[k] = extra[k]; });
  }

  function showError(e) {
    app.error = e;
    var box = $('#error');
    if (!e) { box.hidden = true; box.textContent = ''; return; }
    box.hidden = false;
    box.textContent = '';
    var h = document.createElement('strong');
    h.className = 'message';
    h.textContent = (e.code ? e.code + ': ' : '') + e.message;
    box.appendChild(h);
    if (e.details) {
      var d = document.createElement('div');
      d.className = 'details';
      d.textContent = e.details;
      box.appendChild(d);
    }
  }

  function run() {
    var s = readState();
    app.state = s;
    var hash = toHash(s);
    if (location.hash.replace(/^#/, '') !== hash) history.replaceState(null, '', '#' + hash);
    var body = apiQuery(s);
    $('#api-json').textContent = JSON.stringify(body, null, 2);
    var q = 'q?' + hash + '&wxh=1024x600&png';
    $('#q-url').textContent = q;
    $('#q-url').href = q;
    scheduleRefresh(s);
    if (!body.queries.length) {
      setStatus('idle', { series: 0, points: 0 });
      return Promise.resolve();
    }
    setStatus('loading');
    var n = ++app.requests;
    var t0 = performance.now();
    return fetch('api/query?arrays', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.text().then(function (text) {
        var json;
        try { json = JSON.parse(text); } catch (e) { json = null; }
        if (!r.ok) {
          var err = json && json.error ? json.error : { code: r.status, message: text };
          throw err;
        }
        return json;
      });
    }).then(function (results) {
      if (n !== app.requests) return;
      showError(null);
      var t1 = performance.now();
      render(results.filter(function (r) { return r.metric !== undefined; }), s);
      var t2 = performance.now();
      app.timing = { fetchMs: t1 - t0, renderMs: t2 - t1 };
      // When the frame with the chart is painted: ms since the page began.
      requestAnimationFrame(function () {
        setStatus('done', {
          fetchMs: Math.round(t1 - t0),
          renderMs: Math.round(t2 - t1),
          drawnMs: Math.round(performance.now())
        });
      });
    }).catch(function (e) {
      if (n !== app.requests) return;
      showError(e && e.message ? e : { message: String(e) });
      setStatus('error');
    });
  }

  var refreshTimer = null;
  function scheduleRefresh(s) {
    clearInterval(refreshTimer);
    // Only a range that ends now moves.
    if (s.refresh > 0 && !s.end) refreshTimer = setInterval(run, s.refresh * 1000);
  }

  function seriesName(r) {
    var tags = Object.keys(r.tags).sort().map(function (k) { return k + '=' + r.tags[k]; });
    var name = r.metric + '{' + tags.join(', ') + '}';
    if (r.aggregateTags && r.aggregateTags.length) name += ' (' + r.aggregateTags.join(', ') + ')';
    return name;
  }

  function color(i) {
    var base = ['#e6194b', '#3cb44b', '#4363d8', '#f58231', '#911eb4', '#42d4f4', '#f032e6', '#9a6324',
      '#469990', '#800000', '#808000', '#000075'];
    return i < base.length ? base[i] : 'hsl(' + ((i * 137.508) % 360).toFixed(1) + ',65%,42%)';
  }

  function num(v) {
    if (v === null || v === 'NaN' || v === undefined) return null;
    return typeof v === 'number' ? v : Number(v);
  }

  // The results (dps as [[t, v], ...]) as uPlot's columns: shared sorted
  // times, one column each. Series on the same times (the usual case,
  // and always with downsampling) skip the merge.
  function columns(results) {
    var first = results.length ? results[0].dps : [];
    var aligned = results.every(function (r) {
      if (r.dps.length !== first.length) return false;
      for (var i = 0; i < first.length; i++) if (r.dps[i][0] !== first[i][0]) return false;
      return true;
    });
    var times;
    var index = null;
    if (aligned) {
      times = first.map(function (p) { return p[0]; });
    } else {
      var seen = new Set();
      results.forEach(function (r) { r.dps.forEach(function (p) { seen.add(p[0]); }); });
      times = Array.from(seen).sort(function (a, b) { return a - b; });
      index = new Map();
      times.forEach(function (t, i) { index.set(t, i); });
    }
    var data = [times];
    results.forEach(function (r) {
      var col;
      if (aligned) {
        col = r.dps.map(function (p) { return num(p[1]); });
      } else {
        col = new Array(times.length).fill(null);
        r.dps.forEach(function (p) { col[index.get(p[0])] = num(p[1]); });
      }
      data.push(col);
    });
    return data;
  }

  function render(results, s) {
    app.result = results;
    var names = results.map(seriesName);
    // Which results come from a right-axis metric line.
    var lines = s.metrics.filter(function (m) { return m.metric; });
    var onRight = results.map(function (r) {
      var idx = r.query && typeof r.query.index === 'number' ? r.query.index : -1;
      if (idx >= 0 && lines[idx]) return lines[idx].y2;
      var found = lines.filter(function (m) { return m.metric === r.metric; });
      return found.length === 1 && found[0].y2;
    });
    var data = columns(results);
    var points = 0;
    for (var i = 1; i < data.length; i++) data[i].forEach(function (v) { if (v !== null) points++; });
    var notes = [];
    results.forEach(function (r) {
      (r.annotations || []).concat(r.globalAnnotations || []).forEach(function (a) {
        if (!notes.some(function (n) { return n.startTime === a.startTime && n.description === a.description; })) {
          notes.push(a);
        }
      });
    });
    notes.sort(function (a, b) { return a.startTime - b.startTime; });
    app.notes = notes;
    drawChart(data, names, onRight, s, notes);
    drawLegend(names, data);
    drawNotes(notes);
    // The table is built when it is looked at.
    app.table = { names: names, data: data, drawn: false };
    if (s.view === 'table') showTable();
    $('#summary').textContent = results.length + ' series, ' + points + ' points';
    setStatus('done', { series: results.length, points: points });
  }

  function drawChart(data, names, onRight, s, notes) {
    var box = $('#chart');
    if (app.chart) { app.chart.destroy(); app.chart = null; }
    box.innerHTML = '';
    if (data.length < 2) {
      box.textContent = 'No data';
      return;
    }
    var big = names.length > BIG;
    var hasY2 = onRight.some(Boolean);
    var distr = s.ylog ? 3 : 1;
    var series = [{}].concat(names.map(function (n, i) {
      return {
        label: n,
        stroke: color(i),
        width: 1,
        scale: onRight[i] ? 'y2' : 'y',
        spanGaps: true,
        points: { show: !big && data[0].length < 200 }
      };
    }));
    var axes = [{}, { scale: 'y' }];
    if (hasY2) axes.push({ scale: 'y2', side: 1, size: 70, grid: { show: false } });
    axes[1].size = 70;
    var opts = {
      width: Math.max(300, box.clientWidth || 900),
      height: 420,
      series: series,
      scales: { x: { time: true }, y: { distr: distr }, y2: { distr: distr } },
      axes: axes,
      legend: { show: !big },
      cursor: { drag: { x: true, y: false }, points: { show: !big }, focus: { prox: 16 } },
      focus: { alpha: big ? 1 : 0.4 },
      hooks: {
        // Zooming by dragging sets the range (and so the URL).
        setSelect: [function (u) {
          if (u.select.width < 2) return;
          var a = Math.floor(u.posToVal(u.select.left, 'x'));
          var b = Math.ceil(u.posToVal(u.select.left + u.select.width, 'x'));
          $('#start').value = absolute(a);
          $('#end').value = absolute(b);
          run();
        }],
        setCursor: [function (u) { if (big) hover(u, names); }],
        draw: [function (u) { drawMarkers(u, notes); }]
      }
    };
    if (s.tz) {
      // Times on the axis in the zone the range is read in.
      opts.tzDate = function (ts) {
        try { return uPlot.tzDate(new Date(ts * 1e3), s.tz); } catch (e) { return new Date(ts * 1e3); }
      };
    }
    app.chart = new uPlot(opts, data, box);
  }

  function pad(n) { return n < 10 ? '0' + n : String(n); }

  // A time as OpenTSDB's absolute format, in the state's zone.
  function absolute(secs) {
    var d = new Date(secs * 1000);
    var tz = app.state && app.state.tz;
    if (tz) {
      try {
        var p = {};
        new Intl.DateTimeFormat('en-US', {
          timeZone: tz, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit',
          hour: '2-digit', minute: '2-digit', second: '2-digit'
        }).formatToParts(d).forEach(function (x) { p[x.type] = x.value; });
        return p.year + '/' + p.month + '/' + p.day + '-' + p.hour + ':' + p.minute + ':' + p.second;
      } catch (e) { /* an unknown zone: the browser's */ }
    }
    return d.getFullYear() + '/' + pad(d.getMonth() + 1) + '/' + pad(d.getDate()) + '-' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }

  // With many series: the highest values under the cursor.
  function hover(u, names) {
    var box = $('#legend .hover');
    if (!box) return;
    var idx = u.cursor.idx;
    if (idx === null || idx === undefined) { box.textContent = ''; return; }
    var vals = [];
    for (var i = 1; i < u.data.length; i++) {
      var v = u.data[i][idx];
      if (v !== null && u.series[i].show) vals.push([v, i]);
    }
    vals.sort(function (a, b) { return b[0] - a[0]; });
    box.textContent = absolute(u.data[0][idx]) + '  ' + vals.slice(0, 8).map(function (p) {
      return names[p[1] - 1] + ' = ' + p[0];
    }).join(' · ') + (vals.length > 8 ? ' · +' + (vals.length - 8) + ' more' : '');
  }

  // Many series: a searchable list that shows or hides each line.
  function drawLegend(names, data) {
    var box = $('#legend');
    box.innerHTML = '';
    if (names.length <= BIG) return;
    var head = document.createElement('div');
    head.className = 'legend-head';
    var search = document.createElement('input');
    search.placeholder = 'filter ' + names.length + ' series';
    var hoverLine = document.createElement('div');
    hoverLine.className = 'hover';
    head.appendChild(search);
    box.appendChild(head);
    box.appendChild(hoverLine);
    var list = document.createElement('ul');
    list.className = 'series-list';
    var items = document.createDocumentFragment();
    names.forEach(function (n, i) {
      var li = document.createElement('li');
      li.textContent = n;
      li.style.borderLeftColor = color(i);
      li.addEventListener('click', function () {
        var shown = !app.chart.series[i + 1].show;
        app.chart.setSeries(i + 1, { show: shown });
        li.classList.toggle('off', !shown);
      });
      items.appendChild(li);
    });
    list.appendChild(items);
    box.appendChild(list);
    search.addEventListener('input', function () {
      var q = search.value.toLowerCase();
      $$('li', list).forEach(function (li, i) {
        var match = !q || names[i].toLowerCase().indexOf(q) >= 0;
        li.hidden = !match;
        if (app.chart.series[i + 1].show !== match) app.chart.setSeries(i + 1, { show: match });
      });
    });
  }

  // Annotations: a dashed line each, the text on hover.
  function drawMarkers(u, notes) {
    var over = u.over;
    $$('.note-mark', over).forEach(function (el) { el.remove(); });
    var ctx = u.ctx;
    notes.forEach(function (n) {
      var t = n.startTime > 1e11 ? n.startTime / 1000 : n.startTime;
      var x = u.valToPos(t, 'x', true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.save();
      ctx.strokeStyle = '#b07000';
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.restore();
      var mark = document.createElement('div');
      mark.className = 'note-mark';
      // The overlay is placed over the plotting area, in CSS pixels.
      mark.style.left = (u.valToPos(t, 'x') - 5) + 'px';
      mark.title = n.description + (n.notes ? '\n' + n.notes : '');
      over.appendChild(mark);
    });
  }

  function drawNotes(notes) {
    var box = $('#notes');
    box.innerHTML = '';
    if (!notes.length) return;
    var ul = document.createElement('ul');
    notes.forEach(function (n) {
      var li = document.createElement('li');
      var t = n.startTime > 1e11 ? n.startTime / 1000 : n.startTime;
      li.textContent = absolute(t) + ' ' + n.description + (n.tsuid ? '' : ' (global)');
      ul.appendChild(li);
    });
    box.appendChild(ul);
  }

  // The same result as a table: one row per series, sortable.
  function drawTable(names, data) {
    var box = $('#table');
    box.innerHTML = '';
    var rows = names.map(function (n, i) {
      var col = data[i + 1] || [];
      var vals = col.filter(function (v) { return v !== null; });
      var last = null, first = null;
      for (var j = 0; j < col.length; j++) if (col[j] !== null) { first = col[j]; break; }
      for (var k = col.length - 1; k >= 0; k--) if (col[k] !== null) { last = col[k]; break; }
      var sum = vals.reduce(function (a, b) { return a + b; }, 0);
      return [n, vals.length, first, last, vals.length ? Math.min.apply(null, vals) : null,
        vals.length ? Math.max.apply(null, vals) : null, vals.length ? sum / vals.length : null];
    });
    var heads = ['series', 'points', 'first', 'last', 'min', 'max', 'avg'];
    var table = document.createElement('table');
    var sortBy = 0, asc = true;
    function fill() {
      rows.sort(function (a, b) {
        var x = a[sortBy], y = b[sortBy];
        var c = x === y ? 0 : (x === null ? -1 : y === null ? 1 : (x < y ? -1 : 1));
        return asc ? c : -c;
      });
      table.innerHTML = '';
      var tr = document.createElement('tr');
      heads.forEach(function (h, i) {
        var th = document.createElement('th');
        th.textContent = h + (i === sortBy ? (asc ? ' ▲' : ' ▼') : '');
        th.addEventListener('click', function () {
          if (sortBy === i) asc = !asc; else { sortBy = i; asc = true; }
          fill();
        });
        tr.appendChild(th);
      });
      table.appendChild(tr);
      rows.forEach(function (r) {
        var row = document.createElement('tr');
        r.forEach(function (v, i) {
          var td = document.createElement('td');
          td.textContent = v === null ? '' : (i >= 2 ? Number(v.toPrecision(8)) : v);
          row.appendChild(td);
        });
        table.appendChild(row);
      });
    }
    fill();
    box.appendChild(table);
  }

  // ---- the series browser: metrics, then their tags and counts ----

  function browse() {
    var box = $('#browse');
    box.textContent = 'Loading…';
    fetch('api/suggest?type=metrics&max=10000&q=').then(function (r) { return r.json(); }).then(function (metrics) {
      box.innerHTML = '';
      var list = document.createElement('ul');
      list.className = 'metric-list';
      metrics.forEach(function (m) {
        var li = document.createElement('li');
        var a = document.createElement('a');
        a.href = '#';
        a.textContent = m;
        a.addEventListener('click', function (ev) { ev.preventDefault(); browseMetric(m, li); });
        li.appendChild(a);
        list.appendChild(li);
      });
      var h = document.createElement('p');
      h.textContent = metrics.length + ' metrics';
      box.appendChild(h);
      box.appendChild(list);
    }).catch(function (e) { box.textContent = String(e); });
  }

  function chartLink(metric, key, value) {
    var s = defaultState();
    s.start = app.state ? app.state.start : '1h-ago';
    s.end = app.state ? app.state.end : '';
    s.metrics[0].metric = metric;
    if (key) s.metrics[0].tags = [{ key: key, type: 'literal_or', value: value, group: true }];
    return '#' + toHash(s);
  }

  function browseMetric(metric, li) {
    var old = $('.tag-counts', li);
    if (old) { old.remove(); return; }
    fetch('api/search/lookup?m=' + encodeURIComponent(metric) + '&limit=100000')
      .then(function (r) { return r.json(); })
      .then(function (res) {
        var counts = {};
        (res.results || []).forEach(function (s) {
          Object.keys(s.tags).forEach(function (k) {
            counts[k] = counts[k] || {};
            counts[k][s.tags[k]] = (counts[k][s.tags[k]] || 0) + 1;
          });
        });
        var div = document.createElement('div');
        div.className = 'tag-counts';
        var all = document.createElement('a');
        all.href = chartLink(metric);
        all.textContent = 'chart ' + metric + ' (' + (res.totalResults || 0) + ' series)';
        div.appendChild(all);
        Object.keys(counts).sort().forEach(function (k) {
          var values = Object.keys(counts[k]).sort(function (a, b) { return counts[k][b] - counts[k][a]; });
          var p = document.createElement('div');
          p.className = 'tagk';
          var name = document.createElement('strong');
          name.textContent = k + ' (' + values.length + '): ';
          p.appendChild(name);
          values.slice(0, 200).forEach(function (v) {
            var a = document.createElement('a');
            a.href = chartLink(metric, k, v);
            a.textContent = v + ' ' + counts[k][v];
            p.appendChild(a);
          });
          if (values.length > 200) p.appendChild(document.createTextNode(' … ' + (values.length - 200) + ' more'));
          div.appendChild(p);
        });
        li.appendChild(div);
      });
  }

  // ---- the cardinality view: /api/stats/cardinality's top-N tables ----

  // A table with a caption, a header row and one row per item.
  function countTable(id, caption, heads, rows) {
    var t = document.createElement('table');
    t.id = id;
    t.className = 'card-table';
    var c = document.createElement('caption');
    c.textContent = caption;
    t.appendChild(c);
    var tr = document.createElement('tr');
    heads.forEach(function (h) {
      var th = document.createElement('th');
      th.textContent = h;
      tr.appendChild(th);
    });
    t.appendChild(tr);
    rows.forEach(function (cells) {
      var r = document.createElement('tr');
      cells.forEach(function (v) {
        var td = document.createElement('td');
        td.textContent = v;
        r.appendChild(td);
      });
      t.appendChild(r);
    });
    return t;
  }

  function hourText(s) {
    return new Date(s * 1000).toISOString().slice(0, 13).replace('T', ' ') + 'h';
  }

  function cardinality() {
    var box = $('#cardinality');
    box.textContent = 'Counting…';
    fetch('api/stats/cardinality?topN=' + encodeURIComponent($('#card-top').value))
      .then(function (r) {
        return r.json().then(function (j) {
          if (!r.ok) throw new Error((j.error && j.error.message) || r.statusText);
          return j;
        });
      })
      .then(function (c) {
        box.innerHTML = '';
        var p = document.createElement('p');
        p.id = 'card-total';
        p.textContent = c.totalSeries + ' series, ' + c.metrics + ' metrics, ' + c.tagPairs +
          ' tag pairs (tenant ' + c.tenant + ', counted ' + new Date(c.computedAt).toISOString() + ')';
        box.appendChild(p);
        box.appendChild(countTable('card-metrics', 'Series by metric', ['metric', 'series'],
          c.seriesByMetric.map(function (m) { return [m.metric, m.series]; })));
        box.appendChild(countTable('card-tagks', 'Series by tag key', ['tag key', 'series', 'values'],
          c.seriesByTagKey.map(function (k) { return [k.tagk, k.series, k.values]; })));
        box.appendChild(countTable('card-pairs', 'Series by tag pair', ['tag pair', 'series'],
          c.seriesByTagPair.map(function (t) { return [t.tagk + '=' + t.tagv, t.series]; })));
        box.appendChild(countTable('card-new', 'New series per hour (since the TSD started, last 24 h)',
          ['metric', 'new series', 'per hour'],
          c.newSeriesByMetric.map(function (a) {
            return [a.metric, a.total, a.hours.map(function (h) {
              return hourText(h.hour) + ': ' + h.series;
            }).join(', ')];
          })));
      })
      .catch(function (e) { box.textContent = 'Cardinality: ' + (e.message || String(e)); });
  }

  // ---- start ----

  function load() {
    var s = fromHash(location.hash);
    app.state = s;
    showState(s);
    return run();
  }

  function init() {
    fetch('api/aggregators').then(function (r) { return r.json(); }).then(function (list) {
      if (Array.isArray(list) && list.length) {
        aggregators = list.slice().sort();
        $$('.m-agg').forEach(function (sel) { fillSelect(sel, aggregators, sel.value || 'sum'); });
      }
    }).catch(function () {});
    fetch('api/version').then(function (r) { return r.json(); }).then(function (v) {
      $('#version').textContent = v.version ? 'version ' + v.version : '';
    }).catch(function () {});
    $('#add-metric').addEventListener('click', function () { addMetricBox(emptyMetric()); });
    $('#run').addEventListener('click', run);
    $('#controls').addEventListener('keydown', function (e) {
      if (e.key === 'Enter' && e.target.tagName === 'INPUT') run();
    });
    $('#ylog').addEventListener('change', run);
    $('#card-top').addEventListener('change', cardinality);
    $('#card-refresh').addEventListener('click', cardinality);
    $('#refresh').addEventListener('change', run);
    $$('#presets button').forEach(function (b) {
      b.addEventListener('click', function () {
        $('#start').value = b.dataset.ago + '-ago';
        $('#end').value = '';
        run();
      });
    });
    $$('.tab').forEach(function (b) {
      b.addEventListener('click', function () {
        app.state.view = b.dataset.view;
        showView(b.dataset.view);
        history.replaceState(null, '', '#' + toHash(app.state));
      });
    });
    window.addEventListener('hashchange', function () {
      if (location.hash.replace(/^#/, '') !== toHash(app.state)) load();
    });
    window.addEventListener('resize', function () {
      if (app.chart) app.chart.setSize({ width: $('#chart').clientWidth, height: 420 });
    });
    app.ready = load();
  }

  // For tests and the console.
  app.parseM = parseM;
  app.mText = mText;
  app.toHash = toHash;
  app.fromHash = fromHash;
  app.apiQuery = apiQuery;

  init();
})();
