"""The JavaScript of the board's pages, in one place: the board (``render.render_html``) and the
transcript site (``site``) sort their tables with the same script.

Both scripts only read data attributes and ``textContent`` and move existing rows or set ``hidden``; they
never write HTML, so nothing a record contains can run as script. The site admits its script by hash in
its Content-Security-Policy, so a change here changes that hash (computed from these strings).
"""

from __future__ import annotations

#: Click a header of any ``table.sortable`` to sort by that column (numbers by ``data-sort`` when it
#: parses, else text); a second click reverses. The header's ``aria-sort`` says the order.
SORTABLE_TABLES_JS = """
(function(){
  function key(td){var s=td.getAttribute('data-sort');if(s!==null&&s!==''){var f=parseFloat(s);if(!isNaN(f))return f;}return td.textContent.trim().toLowerCase();}
  function sortTable(table,col,th){
    var tbody=table.tBodies[0];var rows=Array.prototype.slice.call(tbody.rows);
    var asc=th.getAttribute('aria-sort')!=='ascending';
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(c){c.removeAttribute('aria-sort');});
    th.setAttribute('aria-sort',asc?'ascending':'descending');
    rows.sort(function(a,b){var x=key(a.cells[col]),y=key(b.cells[col]);
      var nx=typeof x==='number',ny=typeof y==='number';
      var c=(nx&&ny)?x-y:(nx?-1:(ny?1:(x<y?-1:(x>y?1:0))));return asc?c:-c;});
    rows.forEach(function(r){tbody.appendChild(r);});
  }
  document.querySelectorAll('table.sortable').forEach(function(table){
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){
      th.addEventListener('click',function(){sortTable(table,i,th);});});
  });
})();
"""

#: The transcript pages' episode filters (won / task type / task id text), with the shown count; a page
#: without the filters (no ``#f-won``) is left alone.
EPISODE_FILTERS_JS = """
(function(){
  var won=document.getElementById('f-won'),type=document.getElementById('f-type'),task=document.getElementById('f-task');
  if(!won)return;
  function apply(){
    var w=won.value,t=type?type.value:'',q=task.value.trim().toLowerCase(),shown=0;
    document.querySelectorAll('details.episode').forEach(function(d){
      var ok=(w===''||d.getAttribute('data-won')===w)&&(t===''||d.getAttribute('data-type')===t)&&
             (q===''||d.getAttribute('data-task').toLowerCase().indexOf(q)>=0);
      d.hidden=!ok;if(ok)shown++;
    });
    document.getElementById('f-count').textContent=String(shown);
  }
  [won,type,task].forEach(function(el){if(el){el.addEventListener('input',apply);el.addEventListener('change',apply);}});
  apply();
})();
"""
